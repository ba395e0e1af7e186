#include "hvx/data/dataset.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "hvx/common/logging.h"
#include "hvx/common/status.h"
#include "hvx/data/index.h"

namespace hvx {
namespace data {

absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::vector<std::string>& patterns) {
  if (patterns.empty()) return absl::InvalidArgumentError("no record file patterns given");
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    // Without GLOB_ERR an unreadable or missing directory is simply no match; the message below
    // then says whether the directory exists.
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::string path = g.gl_pathv[i];
        struct stat st;
        if (IsIndexPath(path) || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        matches.push_back(std::move(path));
      }
    }
    ::globfree(&g);
    if (rc == GLOB_NOSPACE) {
      return absl::ResourceExhaustedError(
          absl::StrCat("file pattern '", pattern, "': out of memory"));
    }
    if (matches.empty()) {
      std::string dir = pattern.substr(0, pattern.find_last_of('/') + 1);
      struct stat st;
      std::string hint = (!dir.empty() && ::stat(dir.c_str(), &st) != 0)
                             ? absl::StrCat(" (directory ", dir, " does not exist)")
                             : "";
      return absl::NotFoundError(
          absl::StrCat("file pattern '", pattern, "' matches no record files", hint));
    }
    std::sort(matches.begin(), matches.end());
    for (auto& m : matches) {
      if (seen.insert(m).second) files.push_back(std::move(m));
    }
  }
  return files;
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::vector<std::string>& patterns,
                                                       const DatasetOptions& options) {
  HVX_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandFilePatterns(patterns));
  return OpenFiles(files, options);
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::OpenFiles(const std::vector<std::string>& files,
                                                            const DatasetOptions& options) {
  std::unique_ptr<Dataset> d(new Dataset());
  for (const std::string& path : files) {
    absl::StatusOr<std::vector<RecordLocation>> index =
        options.verify_on_open ? BuildIndex(path, /*verify_payload=*/true) : LoadOrBuildIndex(path);
    if (!index.ok()) {
      if (options.verify_on_open && options.skip_corrupt_files &&
          absl::IsDataLoss(index.status())) {
        struct stat st;
        CorruptionReport report;
        report.path = path;
        report.offset = 0;
        report.bytes_skipped = ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
        report.reason = std::string(index.status().message());
        HVX_LOG(WARNING) << "skipping corrupt record file " << path << " (" << report.bytes_skipped
                         << " bytes): " << report.reason;
        d->skipped_.push_back(std::move(report));
        continue;
      }
      return index.status();
    }
    const RecordFileAccess access = options.load_into_memory ? RecordFileAccess::kMemory
                                    : options.use_mmap       ? RecordFileAccess::kMmap
                                                             : RecordFileAccess::kPread;
    HVX_ASSIGN_OR_RETURN(auto file, RecordFile::Open(path, access));
    const uint32_t file_index = static_cast<uint32_t>(d->files_.size());
    d->paths_.push_back(path);
    d->files_.push_back(std::move(file));
    d->locations_.insert(d->locations_.end(), index->begin(), index->end());
    d->file_of_.insert(d->file_of_.end(), index->size(), file_index);
  }
  d->mapped_ = !d->files_.empty();
  for (const auto& file : d->files_) d->mapped_ = d->mapped_ && file->mapped();
  return d;
}

absl::Status Dataset::Read(int64_t id, bool verify_crc, std::string* payload) const {
  if (id < 0 || id >= num_samples()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample id ", id, " is outside the dataset of ", num_samples(), " samples"));
  }
  return files_[file_of_[static_cast<size_t>(id)]]->ReadAt(locations_[static_cast<size_t>(id)],
                                                           verify_crc, payload);
}

absl::Status Dataset::View(int64_t id, bool verify_crc, std::string* scratch,
                           absl::string_view* payload) const {
  if (id < 0 || id >= num_samples()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample id ", id, " is outside the dataset of ", num_samples(), " samples"));
  }
  return files_[file_of_[static_cast<size_t>(id)]]->ViewAt(locations_[static_cast<size_t>(id)],
                                                           verify_crc, scratch, payload);
}

absl::Status Dataset::ViewInto(int64_t id, bool verify_crc, char* buffer,
                               absl::string_view* payload) const {
  if (id < 0 || id >= num_samples()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample id ", id, " is outside the dataset of ", num_samples(), " samples"));
  }
  return files_[file_of_[static_cast<size_t>(id)]]->ViewInto(locations_[static_cast<size_t>(id)],
                                                             verify_crc, buffer, payload);
}

const std::string& Dataset::FileOf(int64_t id) const {
  return paths_[file_of_[static_cast<size_t>(id)]];
}

std::string Dataset::DescribeSample(int64_t id) const {
  if (id < 0 || id >= num_samples()) return absl::StrCat("sample ", id, " (out of range)");
  return absl::StrCat(FileOf(id), ":", LocationOf(id).offset, " (sample ", id, ")");
}

}  // namespace data
}  // namespace hvx
