// Where this rank sits in the job, as one JSON object, and optionally proof that the collectives
// work across every rank: what tools/hvx_info prints (keys in hvx/core/README.md).
//
//   JobInfo info = DescribeJob(/*check=*/true);   // after hvx::Init, on every rank
//   // {"rank":0,"size":4,"local_rank":0,...,"visible_gpus":0,"check":"pass"}
#ifndef HVX_CORE_JOB_INFO_H_
#define HVX_CORE_JOB_INFO_H_

#include <string>

namespace hvx {

struct JobInfo {
  std::string json;           // one line, no newline
  bool check_failed = false;  // a collective of the check failed or gave a wrong result
};

// Collective when `check` is true (an allreduce, an allgather and a broadcast, each verified).
// Needs hvx::Init.
JobInfo DescribeJob(bool check);

}  // namespace hvx

#endif  // HVX_CORE_JOB_INFO_H_
