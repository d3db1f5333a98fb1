// Ctrl-C for the REPL. SIGINT never ends the session: the handler only
// records the interrupt and wakes whoever waits (the line reader polls the
// self-pipe, the runner forwards it to its child). If the session is busy
// evaluating (a runaway loop in .nns text cannot be interrupted), a third
// Ctrl-C ends the process as SIGINT would have.
#pragma once

namespace nns::repl {

void install_interrupt_handler();
// The read end of the self-pipe: readable after an interrupt.
int interrupt_fd();
// Consumes pending interrupts; true if there was one.
bool take_interrupt();
// While busy, interrupts count toward the third-strike exit.
void set_busy(bool busy);

}  // namespace nns::repl
