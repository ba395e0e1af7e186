// The stacks of every thread of a process, asked for from outside it without ptrace (which
// Kubernetes denies without SYS_PTRACE): the program installs a handler once, and whoever may
// signal it (the rank wrapper, its parent) sends kStackSignal; each of its threads then writes its
// own symbolized stack to the pipe the asker reads.
//
//   // in the program (hvx::Init does it when the wrapper passed HVX_STACK_FD):
//   InstallStackDumper(fd);
//   // in the asker, which made the pipe (non-blocking) and reads its other end:
//   kill(pid, kStackSignal);  ... read "thread 4711 hvx-engine\n  #0 0x5634... hvx::Foo()+0x1c\n"
//
// The signal's handler only wakes a helper thread ("hvx-stacks"), which asks Python's faulthandler
// for every Python thread's frames (PythonStackSignal, when hvx.torch registered it), then signals
// every other thread (tgkill, StackFollowerSignal), each of which writes its own stack: one
// write() per thread, at most PIPE_BUF bytes, so threads' stacks never interleave; then it writes
// "signalled N threads", so that the reader knows how many stacks to wait for. Handlers that
// unwind run on the threads' own stacks, never on an alternate signal stack (Python's is 16 KiB
// of heap). A round lasts a second; requests in it start no new one. The pipe must be
// non-blocking: a full pipe loses stacks instead of blocking a thread inside the handler.
// kStackSignal is SIGURG, which a process without the handler ignores, so asking one that never
// installed it does no harm.
#ifndef HVX_COMMON_STACK_DUMP_H_
#define HVX_COMMON_STACK_DUMP_H_

#include <string>

#include "hvx/common/flight_ring.h"  // kStackFdVariable, kStackSignal

namespace hvx {

// Asks for every thread's stack (process-directed).
int StackSignal();
// What the helper sends each other thread (a real-time signal; only after installation).
int StackFollowerSignal();
// What the helper sends the process for Python's frames, once EnablePythonStacks was called
// (hvx.torch registers faulthandler on it first).
int PythonStackSignal();
void EnablePythonStacks();

// Installs the handlers that write to `fd` (which must be a non-blocking pipe's write end).
// Returns "" or why not (fd not a pipe; a handler of the program's own already on the signal).
// Once per process; a second call changes nothing and returns "".
std::string InstallStackDumper(int fd);

// The pipe InstallStackDumper installed the handlers for, -1 when none.
int StackDumpFd();

// The write end named by HVX_STACK_FD when it is a pipe this process holds; -1 otherwise.
int StackFdFromEnvironment();

}  // namespace hvx

#endif  // HVX_COMMON_STACK_DUMP_H_
