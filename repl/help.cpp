// help and help TOPIC: the commands and the plan primitives.
#include <ostream>

#include "repl/session.h"

namespace nns::repl {

namespace {

struct Topic {
  const char* name;
  const char* usage;
  const char* text;
  const char* brief = "";  // commands: the line in the command list
};

const Topic kTopics[] = {
    {"help", "help [TOPIC]",
     "Lists the commands, or explains one command or plan primitive (help trans, help directives, help keys).",
     "this text, or one command or plan primitive"},
    {"ops", "ops [PATTERN]",
     "Lists the model's top-level ops (those a plan partitions), or those whose qualified\n"
     "name matches PATTERN — the glob select() uses: '*' any run of characters, '?' one.\n"
     "Each line: name, op kind, dimop annotation (bound to this call's shapes), input and\n"
     "output shapes, and the op's current partition and devices in the session plan.\n"
     "  ops blocks.0.*        ops *.linear#*        ops *attention*",
     "list ops: annotation, shapes, partition and devices"},
    {"show", "show OP | PARAM",
     "One op: annotation, identifier sizes, operands, current partition, and its transform\n"
     "space — every legal trans() choice. Each choice is tried on a scratch copy of the\n"
     "plan (split into ngpus parts, part i on device i) and answered with the collectives\n"
     "it would add or remove and the memory per device; the session plan is not touched.\n"
     "For an op that is partitioned already the trials start from it unpartitioned.\n"
     "With a parameter or input name: its shape and the slices each device holds.",
     "one op: transform space and what each choice would communicate"},
    {"status", "status",
     "The plan in numbers: devices, partitioned ops, sub-ops without a device, order\n"
     "constraints, collectives per step and their bytes, memory per device by kind.",
     "the plan in numbers: collectives, memory per device"},
    {"comm", "comm",
     "Every collective the current plan derives, forward and backward (as nns check\n"
     "--emit=comm prints it). Sub-ops without a device count as on every device.",
     "every collective the plan derives"},
    {"schedule", "schedule",
     "The tasks each rank runs per step under the plan's schedule (schedule(...) or\n"
     "order(task, task)), as a text timeline with unit task times (as nns check\n"
     "--emit=schedule prints it).",
     "the plan's pipeline schedule as a timeline"},
    {"plan", "plan [NAME | search DEVICE [NODES]]",
     "Without NAME: prints the session plan as a .nns plan block; pasted into the model\n"
     "file (or written by save) it evaluates to the same plan. With NAME: evaluates plan\n"
     "NAME of the file (or one defined at the prompt) for the session's devices and makes\n"
     "it the session plan, reporting what changed (undo goes back).\n"
     "plan search DEVICE [NODES] runs nns plan's search for the session's device count on\n"
     "profile DEVICE (a profile's name, as nns help lists them, or a .json; NODES nodes), keeping the config's\n"
     "micro-batches, prints the best plan, the one-device reference and the Megatron-style one\n"
     "(where the model has its structure), declares the best as\n"
     "plan searched_N and makes it the session plan (undo goes back).",
     "print the plan as .nns; with NAME, use the file's plan NAME; search: find one"},
    {"undo", "undo [N]", "Takes back the last N (default 1) changes to the plan: directives, reset, gpus, plan NAME.",
     "take back the last change(s) to the plan"},
    {"reset", "reset",
     "Back to the unpartitioned model: every op whole and without a device. undo brings the plan back.",
     "back to the unpartitioned model"},
    {"gpus", "gpus [N]",
     "Shows the number of devices, or starts a new plan for N devices (binding ngpus = N). undo goes back.",
     "show or set the device count (starts a new plan)"},
    {"config", "config [NAME]",
     "Shows the session's config and the file's configs, or evaluates the model file again with\n"
     "config NAME: the plan starts over on the same device count, and the undo history and the\n"
     "session's own definitions are gone. A config that does not evaluate leaves the session as it was.",
     "show or switch the model file's config (starts a new plan)"},
    {"save", "save FILE [--plan-only]",
     "Writes the model file with the session plan appended as a plan block (named session,\n"
     "or session_2... if the file has one), so that `nns check FILE --plan session --gpus N`\n"
     "and `nns run` read it. --plan-only writes the plan block alone, to paste elsewhere.\n"
     "The plan is written parametric in ngpus (split counts and device ranges equal to the\n"
     "device count become ngpus) when evaluating it again gives this plan at this count and a\n"
     "complete plan at another (2, or 4 from 2); otherwise it is pinned to this count, and\n"
     "save names the directive that fails at the other count.\n"
     "A model that imports files by relative path should be saved beside it.",
     "write the model file with the plan appended"},
    {"run", "run N [--verify]",
     "Trains N steps of the file's train block on CPU ranks, one per device of the plan, by\n"
     "starting this nns binary's run command (output streams as it trains; Ctrl-C stops it\n"
     "and the session goes on). --verify compares every step's loss, gradients and weights\n"
     "with one device. When this build's `nns run` cannot execute partitioned plans yet,\n"
     "the ranks run as data-parallel replicas of the model instead, and run says so.",
     "train N steps on CPU ranks (--verify: against one device)"},
    {"quit", "quit", "Ends the session (so does exit, or Ctrl-D on an empty line).",
     "end the session (also exit, Ctrl-D)"},
    {"directives", "directives",
     "Any .nns text that changes the session plan is a directive: a call of trans, assign,\n"
     "replicate, order or recompute, or any statement that makes them (a for loop over\n"
     "select(...), a function of your own). ngpus is bound to the device count. Each is\n"
     "answered with what changed: the ops whose partition changed, the collectives added (+)\n"
     "and removed (-) with primitive, device group and bytes per device, memory per device\n"
     "before -> after, and the verdict. A refused directive prints its diagnostic and leaves\n"
     "the plan as it was, even if it had made changes before failing. Example:\n"
     "  for op in select(\"blocks.*.mlp.fc1.linear#*\") {\n"
     "    let parts = trans(op, dim = \"n\", num = ngpus)\n"
     "    for i in 0..ngpus { assign(parts[i], i) }\n"
     "  }"},
    {"trans", "trans(op, dim = \"ID\" | \"value\" | \"batch\", num = N)  or  trans(op, idx = I, dim = D, num = N)",
     "op-trans: splits a sub-op into N parts along an identifier of its dimop annotation\n"
     "(show OP lists them), by value (partial sums; ops linear in their first input), or\n"
     "along dim 0 of its first tensor input (\"batch\"). Returns the list of parts. The op\n"
     "must not be placed yet; the identifier's size must divide by N."},
    {"assign", "assign(op | ops, device)  or  assign(parts, devices, order = \"given\" | \"auto\")",
     "op-assign: places sub-ops on one device (0..ngpus-1), or parts[i] on devices[i];\n"
     "with order = \"auto\" nns chooses which part goes to which listed device (the order\n"
     "whose adapters around the op cost least, e.g. 0,4,1,5,2,6,3,7 after a V(2) D0(4) producer)."},
    {"replicate", "replicate(op | ops, devices)",
     "op-assign of one sub-op to several devices, each running it whole:\n"
     "  replicate(unassigned(), 0..ngpus)   places everything not placed yet."},
    {"order", "order(before, after)", "op-order: every leaf of `before` runs before every leaf of `after`."},
    {"recompute", "recompute(ops)", "Marks sub-ops (and their parts) to be recomputed in backward instead of kept."},
    {"regather", "regather(ops)",
     "Marks sub-ops whose all-gathered inputs are dropped after the forward and gathered\n"
     "again for the backward (sequence parallelism: keep the token shard, not the sequence)."},
    {"select", "select(pattern = \"*\", kind = none)",
     "The top-level ops whose qualified name matches the glob (and whose kind is `kind`)."},
    {"unassigned", "unassigned()", "The sub-ops without a device so far."},
    {"splittable", "splittable(op, dim)", "Whether trans(op, dim = dim, ...) would find that dimension."},
    {"kind", "kind(op)", "The op's kind (\"linear\", \"attention\", ...); name(op) its qualified name."},
    {"keys", "keys",
     "Line editing is libedit's (emacs keys; ~/.editrc applies). Tab completes commands,\n"
     "op and parameter names (one dotted level at a time), annotation identifiers after\n"
     "dim = \", and names in scope. Up/Down walk the history, kept in ~/.nns_history (or\n"
     "$NNS_HISTORY). An unclosed ( [ { continues on the next line with a ...> prompt.\n"
     "Ctrl-C cancels the input being typed or a running `run`; Ctrl-D on an empty line\n"
     "ends the session."},
};

}  // namespace

bool Session::cmd_help(const Command& c) {
  if (c.args.size() > 1) return usage("help");
  if (c.args.empty()) {
    out_ << "Commands (a line that starts with one; ':name' forces a command where .nns could be meant):\n";
    for (const Topic& t : kTopics) {
      std::string name = t.name;
      if (name == "directives") break;
      std::string usage_text = t.usage;
      usage_text.resize(std::max<size_t>(usage_text.size(), 26), ' ');
      out_ << "  " << usage_text << " " << t.brief << "\n";
    }
    out_ << "Anything else is .nns: an expression prints its value, definitions persist, and plan\n"
            "directives act on the session plan (ngpus is bound):\n"
            "  for op in select(\"blocks.*.attn.attention#*\") {\n"
            "    let parts = trans(op, dim = \"h\", num = ngpus)\n"
            "    for i in 0..ngpus { assign(parts[i], i) }\n"
            "  }\n"
            "Each directive is answered with what changed: ops, collectives (+ added, - removed:\n"
            "primitive, group, bytes), memory per device and the verdict; a refused one leaves the\n"
            "plan unchanged. More: help directives, help trans, help keys, help COMMAND.\n";
    return true;
  }
  std::string topic = c.args[0];
  if (topic == "exit") topic = "quit";
  for (const Topic& t : kTopics)
    if (topic == t.name) {
      out_ << t.usage << "\n" << t.text << "\n";
      return true;
    }
  err_ << "nns: error: no help on '" << c.args[0] << "'; 'help' lists the commands\n";
  return false;
}

bool Session::usage(const std::string& command) {
  for (const Topic& t : kTopics)
    if (command == t.name) {
      err_ << "nns: error: usage: " << t.usage << "\n";
      return false;
    }
  err_ << "nns: error: bad use of " << command << "\n";
  return false;
}

}  // namespace nns::repl
