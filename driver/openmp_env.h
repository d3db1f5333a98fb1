// How nns's own processes wait: OpenMP threads sleep when they have no work
// instead of spinning.
//
// libgomp (what Debian's oneDNN runs on; `ldd nns`) spins a thread that
// waits at a barrier or for the next parallel region for up to 300000
// iterations (about 3 ms) before it sleeps, unless OMP_WAIT_POLICY says
// PASSIVE. On cores shared with anything else (other ranks, another
// process) those spinning threads take the cores from the work they wait
// for: a gpt tiny step went from 3 ms to 660-940 ms with a busy loop beside
// it, and back to 3.3 ms with OMP_WAIT_POLICY=PASSIVE.
//
// libgomp reads its environment once, in its library constructor, before
// main() runs (and before anything main() could setenv), so the setting
// takes effect by running nns again with it: apply_openmp_defaults sets
// what the user has not set and re-executes this program (/proc/self/exe,
// same arguments) once. A variable the user set, to any value, is left as
// it is: OMP_WAIT_POLICY=ACTIVE brings back the spinning.
#pragma once

namespace nns::driver {

// Call first thing in main(). Applies to runs of several ranks only (`nns
// run --gpus N`, `nns profile`, a launcher's rank; a single device keeps the
// spinning, faster on an idle machine; set OMP_WAIT_POLICY=PASSIVE to share
// its cores). Returns when the
// environment already holds
// the defaults (then libgomp started with them), or when re-executing
// failed (then nns runs on as before, spinning).
void apply_openmp_defaults(int argc, char** argv);

}  // namespace nns::driver
