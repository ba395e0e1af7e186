// Control records: the lines the per-rank wrapper writes on its stderr to tell hvxrun that a rank
// started, ended (code or signal) or could not run. Hydra carries them with the rank's output;
// hvxrun's OutputRouter (output.h) picks them out and never shows them. The channel is the
// wrapper's alone: the program's stdout and stderr are pipes the wrapper reads and passes on with
// every \x01 escaped (EscapeMarkerBytes), so no byte a program prints starts a record or a hydra
// marker. This part needs only the C++ library because the wrapper binary links nothing else.
//
// clang-format off
//   WriteFully(2, FormatExitRecord(3, "h2", wait_status));  // "\1hvxctl exit rank=3 code=3 host=h2\n"
//   std::optional<ControlRecord> r = ParseControlRecord(...);  // output.h
// clang-format on
#ifndef HVX_LAUNCH_RECORDS_H_
#define HVX_LAUNCH_RECORDS_H_

#include <string>

namespace hvx {
namespace launch {

// Every record is one line starting with this.
inline constexpr char kControlMagic[] = "\x01hvxctl ";

// The exit status of a program that ended cleanly because it was asked to stop for a restart (a
// preemption notice, a time limit): it saved its state and wants to be run again (EX_TEMPFAIL).
// The trainer's ranks end with it after a checkpoint request; the wrapper treats it as a clean
// end, as it does 0, and hvxrun exits with it when every rank ended with 0 or it after a notice.
inline constexpr int kPreemptedExitCode = 75;

std::string FormatStartRecord(int rank, const std::string& host, int pid);
// `wait_status` as returned by waitpid().
std::string FormatExitRecord(int rank, const std::string& host, int wait_status);
// Newlines in `message` become spaces: a record is one line. `exit_code` is what hvxrun exits
// with when this is the job's first failure.
std::string FormatErrorRecord(int rank, const std::string& host, const std::string& message,
                              int exit_code = 1);

// The flight recorder's dump (flight_ring.h): a header naming the rank's process state (`proc`:
// /proc's state letter, R S D T Z, or "exited"), the kernel function its main thread waits in
// (`wchan`, "" when running or unknown), the wrapper's monotonic clock in ns and why it dumped
// ("exit": the program failed, "stop": hydra is stopping the job), then one record per event.
std::string FormatFlightRecord(int rank, const std::string& host, const std::string& proc,
                               const std::string& wchan, long long now_ns, size_t events,
                               const std::string& why);
std::string FormatFlightEventRecord(int rank, const std::string& encoded_event);
// The most stack lines one dump sends.
inline constexpr size_t kMaxFlightStackLines = 2000;
// One line of the program's threads' stacks (stack_dump.h), sent after a dump's events: the
// first line of a set says so, how many lines the set has and why they were taken ("idle": the
// job looked stuck, "stop"); bytes that are not printable ASCII become '?'.
std::string FormatFlightStackRecord(int rank, const std::string& line, bool first = false,
                                    const std::string& why = "", size_t lines = 0);

// A program's output as the wrapper passes it on: every \x01 (the byte that begins hydra's rank
// marker and kControlMagic) becomes the four characters "\x01", so that nothing a rank prints can
// read as a marker or a record. Every other byte is kept.
std::string EscapeMarkerBytes(const char* data, size_t size);

// Writes all of `data` to fd, retrying short writes and EINTR; gives up silently when the fd is
// closed (the output has nowhere to go).
void WriteFully(int fd, const std::string& data);

}  // namespace launch
}  // namespace hvx

#endif  // HVX_LAUNCH_RECORDS_H_
