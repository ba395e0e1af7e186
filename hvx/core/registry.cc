// The process-wide tables of registered transports and device data planes.
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

}  // namespace hvx
