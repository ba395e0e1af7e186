// The process-wide tables of registered transports, device and CPU data planes and Init-time
// checks.
#include <map>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "hvx/core/transport.h"

namespace hvx {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, TransportFactory> transports ABSL_GUARDED_BY(mu);
  std::map<DeviceType, DataPlaneFactory> planes ABSL_GUARDED_BY(mu);
  std::map<std::string, CpuPlaneProvider> cpu_planes ABSL_GUARDED_BY(mu);
  std::map<std::string, InitCheck> init_checks ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

bool RegisterTransport(const std::string& name, TransportFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.transports[name] = std::move(factory);
  return true;
}

std::vector<std::string> RegisteredTransports() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.transports) names.push_back(name);
  return names;
}

TransportFactory FindTransport(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.transports.find(name);
  return it == r.transports.end() ? TransportFactory() : it->second;
}

bool RegisterDataPlane(DeviceType type, DataPlaneFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.planes[type] = std::move(factory);
  return true;
}

DataPlaneFactory FindDataPlane(DeviceType type) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.planes.find(type);
  return it == r.planes.end() ? DataPlaneFactory() : it->second;
}

bool RegisterCpuPlane(const std::string& name, CpuPlaneProvider provider) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.cpu_planes[name] = std::move(provider);
  return true;
}

CpuPlaneProvider FindCpuPlane(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.cpu_planes.find(name);
  return it == r.cpu_planes.end() ? CpuPlaneProvider() : it->second;
}

bool RegisterInitCheck(const std::string& name, InitCheck check) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (check) {
    r.init_checks[name] = std::move(check);
  } else {
    r.init_checks.erase(name);
  }
  return true;
}

std::vector<std::pair<std::string, InitCheck>> RegisteredInitChecks() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return {r.init_checks.begin(), r.init_checks.end()};
}

}  // namespace hvx
