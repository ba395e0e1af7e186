#include "hvx/train/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "hvx/common/status.h"

namespace hvx {
namespace train {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::TextFormat;

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the config file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectErrors(std::string source) : source_(std::move(source)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty())
      first_ = absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string source_;
  std::string first_;
};

// Parses (merge = true: merges) `text` into *config, recording field locations in *tree.
absl::Status ParseInto(absl::string_view text, absl::string_view source, bool merge,
                       TrainConfig* config, TextFormat::ParseInfoTree* tree) {
  TextFormat::Parser parser;
  CollectErrors errors{std::string(source)};
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(tree);
  const std::string input(text);
  const bool ok =
      merge ? parser.MergeFromString(input, config) : parser.ParseFromString(input, config);
  if (!ok) {
    return absl::InvalidArgumentError(errors.first().empty()
                                          ? absl::StrCat(source, ": cannot parse the config")
                                          : errors.first());
  }
  return absl::OkStatus();
}

// One semantic problem: the dotted field path ("data.batch_size") and what is wrong with it.
struct FieldError {
  std::string field;
  std::string message;
};

// The problems CheckConfig finds, in the order of the config's sections.
class FieldErrors {
 public:
  void add(std::string field, std::string message) {
    errors_.push_back({std::move(field), std::move(message)});
  }
  std::vector<FieldError> take() { return std::move(errors_); }

 private:
  std::vector<FieldError> errors_;
};

// Every float and double of `m` (and of the messages in it) is a finite number: text format reads
// "nan" and "inf", which no range check below would refuse (NaN fails no comparison it is not in)
// and which would reach the optimizer and the schedule as they are.
void CheckFinite(const Message& m, const std::string& prefix, FieldErrors& errors) {
  const Reflection* reflection = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string path =
        prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    const int n = field->is_repeated() ? reflection->FieldSize(m, field) : 1;
    for (int i = 0; i < n; ++i) {
      double value = 0;
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_MESSAGE:
          CheckFinite(field->is_repeated() ? reflection->GetRepeatedMessage(m, field, i)
                                           : reflection->GetMessage(m, field),
                      path, errors);
          continue;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          value = field->is_repeated() ? reflection->GetRepeatedDouble(m, field, i)
                                       : reflection->GetDouble(m, field);
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          value = field->is_repeated() ? reflection->GetRepeatedFloat(m, field, i)
                                       : reflection->GetFloat(m, field);
          break;
        default:
          continue;
      }
      if (!std::isfinite(value)) {
        errors.add(path, absl::StrCat("must be a finite number, got ", value));
        break;
      }
    }
  }
}

// model: exactly one of a known name and an existing TorchScript file; classes.
void CheckModel(const TrainConfig& c, FieldErrors& errors) {
  const auto& models = KnownModels();
  const bool scripted = !c.model().torchscript().empty();
  if (scripted && !c.model().name().empty()) {
    errors.add("model.torchscript",
               "set model.name (a built-in model) or model.torchscript, not both");
  } else if (scripted) {
    if (!FileExists(c.model().torchscript())) {
      errors.add(
          "model.torchscript",
          absl::StrCat(c.model().torchscript(),
                       " does not exist (save one with torch.jit.script(model).save(path))"));
    }
  } else if (c.model().name().empty()) {
    errors.add("model.name", absl::StrCat("no model given; set one of ",
                                          absl::StrJoin(models, ", "), ", or model.torchscript"));
  } else if (std::find(models.begin(), models.end(), c.model().name()) == models.end()) {
    errors.add("model.name", absl::StrCat("unknown model \"", c.model().name(),
                                          "\"; known models: ", absl::StrJoin(models, ", ")));
  }
  if (c.model().num_classes() < 2) errors.add("model.num_classes", "must be at least 2");
}

// data.example, which only format: EXAMPLE reads: its input feature's key, kind, shape and
// normalisation.
void CheckExampleInput(const DataConfig& d, FieldErrors& errors) {
  if (d.format() == EXAMPLE) {
    const FeatureSpec& f = d.example().input();
    if (f.key().empty()) {
      errors.add("data.example.input.key", "name the Example feature that is the model's input");
    }
    if (f.kind() == FeatureSpec::KIND_UNSPECIFIED) {
      errors.add("data.example.input.kind", "set JPEG, FLOAT_LIST, INT64_LIST or BYTES");
    } else if (f.kind() != FeatureSpec::JPEG) {
      if (f.shape().empty()) {
        errors.add("data.example.input.shape",
                   "give one sample's input shape as the model takes it, e.g. shape: [1, 28, 28]");
      }
      for (int64_t dim : f.shape()) {
        if (dim < 1) {
          errors.add("data.example.input.shape", absl::StrCat("has a dimension < 1 (", dim, ")"));
          break;
        }
      }
      if (f.channels_last_stored() && f.shape_size() != 3) {
        errors.add("data.example.input.channels_last_stored",
                   "needs a 3-dimensional shape [C, H, W]");
      }
      for (float sd : f.stddev()) {
        if (sd == 0) {
          errors.add("data.example.input.stddev", "must not be 0");
          break;
        }
      }
      for (const auto* v : {&f.mean(), &f.stddev()}) {
        if (v->size() > 1 && !f.shape().empty() && v->size() != f.shape(0)) {
          errors.add(v == &f.mean() ? "data.example.input.mean" : "data.example.input.stddev",
                     absl::StrCat("needs 1 value or ", f.shape(0),
                                  " (one per channel, the first "
                                  "dimension of the shape), got ",
                                  v->size()));
          break;
        }
      }
    }
  } else if (d.has_example()) {
    errors.add("data.example", "is only read with format: EXAMPLE");
  }
}

// data: files, format, batch sizes, threads, and the model the format can feed.
void CheckData(const TrainConfig& c, FieldErrors& errors) {
  const DataConfig& d = c.data();
  if (d.train_files().empty()) {
    errors.add("data.train_files", "no training files given (a glob pattern)");
  }
  if (d.format() == RECORD_FORMAT_UNSPECIFIED) {
    errors.add("data.format", "set FASHION_MNIST, IMAGENET or EXAMPLE (with data.example)");
  }
  CheckExampleInput(d, errors);
  if (d.batch_size() <= 0) {
    errors.add("data.batch_size",
               absl::StrCat("must be > 0 (samples per rank per step), got ", d.batch_size()));
  }
  if (d.eval_batch_size() < 0) errors.add("data.eval_batch_size", "must be >= 0");
  if (d.reader_threads() < 0 || d.decode_threads() < 0 || d.prefetch_batches() < 0) {
    errors.add("data.reader_threads", "thread counts and prefetch depth must be >= 0");
  }
  const bool image_model = c.model().name() == "mlp" || c.model().name() == "cnn";
  if (d.format() == IMAGENET && image_model) {
    errors.add("model.name",
               absl::StrCat("\"", c.model().name(),
                            "\" takes 28x28 grey images; use resnet18 or resnet50 for IMAGENET"));
  }
  if (HasJpegInput(d) && d.image_size() < 32) errors.add("data.image_size", "must be at least 32");
  if (d.gpu_jpeg_decode() && !HasJpegInput(d) && d.format() != RECORD_FORMAT_UNSPECIFIED) {
    errors.add("data.gpu_jpeg_decode",
               "the data have no JPEG input (format IMAGENET, or EXAMPLE with a JPEG feature)");
  }
}

// optimizer: rates, momentum, decay, schedule, clipping, micro-batches, betas, lr scaling.
void CheckOptimizer(const TrainConfig& c, FieldErrors& errors) {
  const DataConfig& d = c.data();
  const OptimizerConfig& o = c.optimizer();
  if (!(o.lr() > 0)) errors.add("optimizer.lr", "must be > 0");
  if (o.momentum() < 0 || o.momentum() >= 1) errors.add("optimizer.momentum", "must be in [0, 1)");
  if (o.weight_decay() < 0) errors.add("optimizer.weight_decay", "must be >= 0");
  if (o.warmup_epochs() < 0) errors.add("optimizer.warmup_epochs", "must be >= 0");
  if (o.schedule() == OptimizerConfig::STEP && o.step_epochs().empty()) {
    errors.add("optimizer.step_epochs", "schedule STEP needs at least one step_epochs entry");
  }
  for (int i = 1; i < o.step_epochs_size(); ++i) {
    if (o.step_epochs(i) <= o.step_epochs(i - 1)) {
      errors.add("optimizer.step_epochs", "must be strictly increasing");
      break;
    }
  }
  if (!(o.clip_grad_norm() >= 0)) {
    errors.add("optimizer.clip_grad_norm", "must be >= 0 (0: no clipping)");
  }
  if (o.backward_passes_per_step() < 1) {
    errors.add("optimizer.backward_passes_per_step", "must be >= 1");
  } else if (d.batch_size() > 0 && o.backward_passes_per_step() > d.batch_size()) {
    errors.add("optimizer.backward_passes_per_step",
               absl::StrCat("is ", o.backward_passes_per_step(), ", more micro-batches than the ",
                            d.batch_size(), " samples of data.batch_size"));
  }
  if (o.kind() == OptimizerConfig::LAMB || o.kind() == OptimizerConfig::ADAMW ||
      o.kind() == OptimizerConfig::ADAM) {
    if (!(o.beta1() >= 0 && o.beta1() < 1)) errors.add("optimizer.beta1", "must be in [0, 1)");
    if (!(o.beta2() >= 0 && o.beta2() < 1)) errors.add("optimizer.beta2", "must be in [0, 1)");
  }
  if (o.lr_scaling() == OptimizerConfig::BY_GLOBAL_BATCH && o.reference_batch() <= 0) {
    errors.add("optimizer.reference_batch", "must be > 0 with lr_scaling BY_GLOBAL_BATCH");
  }
}

// The top-level training settings: label smoothing, moving average, epochs, device.
void CheckTraining(const TrainConfig& c, FieldErrors& errors) {
  if (!(c.label_smoothing() >= 0 && c.label_smoothing() < 1)) {
    errors.add("label_smoothing", absl::StrCat("must be in [0, 1), got ", c.label_smoothing()));
  }
  if (!(c.ema_decay() >= 0 && c.ema_decay() < 1)) {
    errors.add("ema_decay",
               absl::StrCat("must be in [0, 1) (0: no moving average), got ", c.ema_decay()));
  }
  if (c.epochs() <= 0) errors.add("epochs", absl::StrCat("must be > 0, got ", c.epochs()));
  if (c.device() != "cpu" && c.device() != "cuda" && c.device() != "auto") {
    errors.add("device",
               absl::StrCat("must be \"cpu\", \"cuda\" or \"auto\", got \"", c.device(), "\""));
  }
}

// engine, checkpoint and launch.
void CheckEngineCheckpointLaunch(const TrainConfig& c, FieldErrors& errors) {
  const EngineConfig& e = c.engine();
  if (!e.compression().empty() && e.compression() != "none" && e.compression() != "fp16" &&
      e.compression() != "bf16") {
    errors.add("engine.compression", absl::StrCat("unknown compression \"", e.compression(),
                                                  "\"; use \"none\", \"fp16\" or \"bf16\""));
  }
  if (e.gradient_predivide_factor() <= 0) {
    errors.add("engine.gradient_predivide_factor", "must be > 0");
  }
  if (c.checkpoint().keep() <= 0) errors.add("checkpoint.keep", "must be > 0");
  if (!(c.checkpoint().every_seconds() >= 0)) {
    errors.add("checkpoint.every_seconds", "must be >= 0 (0: no time-based checkpoints)");
  }
  const std::string& np = c.launch().num_processes();
  if (np != "auto") {
    int n = 0;
    if (!absl::SimpleAtoi(np, &n) || n <= 0) {
      errors.add("launch.num_processes",
                 absl::StrCat("must be a positive number or \"auto\", got \"", np, "\""));
    }
  }
}

std::vector<FieldError> CheckConfig(const TrainConfig& c) {
  FieldErrors errors;
  CheckFinite(c, "", errors);
  CheckModel(c, errors);
  CheckData(c, errors);
  CheckOptimizer(c, errors);
  CheckTraining(c, errors);
  CheckEngineCheckpointLaunch(c, errors);
  return errors.take();
}

// The location of a dotted field path in one parse; false when that parse did not set it.
bool FindLocation(const TextFormat::ParseInfoTree& root, const Descriptor* descriptor,
                  absl::string_view path, int* line, int* column) {
  const TextFormat::ParseInfoTree* tree = &root;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* field = descriptor->FindFieldByName(parts[i]);
    if (field == nullptr) return false;
    if (i + 1 == parts.size()) {
      const int index = field->is_repeated() ? 0 : -1;
      const auto location = tree->GetLocation(field, index);
      if (location.line < 0) return false;
      *line = location.line + 1;
      *column = location.column + 1;
      return true;
    }
    tree = tree->GetTreeForNested(field, field->is_repeated() ? 0 : -1);
    if (tree == nullptr) return false;
    descriptor = field->message_type();
  }
  return false;
}

// Rewrites each of the comma-separated patterns in `*patterns` with `rewrite` and joins them again.
absl::Status RewriteFilePatterns(std::string* patterns,
                                 const std::function<absl::Status(std::string*)>& rewrite) {
  std::vector<std::string> parts = SplitFilePatterns(*patterns);
  for (std::string& part : parts) HVX_RETURN_IF_ERROR(rewrite(&part));
  *patterns = absl::StrJoin(parts, ",");
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& KnownModels() {
  static const auto* models = new std::vector<std::string>{"mlp", "cnn", "resnet18", "resnet50"};
  return *models;
}

absl::StatusOr<std::string> ExpandHome(absl::string_view path, const std::string& home) {
  const bool leading_tilde = path == "~" || absl::StartsWith(path, "~/");
  if (!leading_tilde && !absl::StrContains(path, "$HOME") && !absl::StrContains(path, "${HOME}")) {
    return std::string(path);
  }
  if (home.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", path, "\" refers to the home directory, but HOME is not set"));
  }
  if (leading_tilde) path.remove_prefix(1);
  return absl::StrCat(leading_tilde ? home : "",
                      absl::StrReplaceAll(path, {{"${HOME}", home}, {"$HOME", home}}));
}

absl::Status ExpandConfigPaths(const std::string& home, TrainConfig* config) {
  auto expand = [&home](absl::string_view field, std::string* path) -> absl::Status {
    auto expanded = ExpandHome(*path, home);
    if (!expanded.ok())
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", expanded.status().message()));
    *path = *std::move(expanded);
    return absl::OkStatus();
  };
  auto expand_patterns = [&expand](absl::string_view field, std::string* patterns) {
    return RewriteFilePatterns(patterns, [&](std::string* part) { return expand(field, part); });
  };
  HVX_RETURN_IF_ERROR(expand("model.torchscript", config->mutable_model()->mutable_torchscript()));
  DataConfig* d = config->mutable_data();
  HVX_RETURN_IF_ERROR(expand_patterns("data.train_files", d->mutable_train_files()));
  HVX_RETURN_IF_ERROR(expand_patterns("data.eval_files", d->mutable_eval_files()));
  FashionMnistSource* s = d->mutable_fashion_mnist_source();
  HVX_RETURN_IF_ERROR(expand("data.fashion_mnist_source.idx_dir", s->mutable_idx_dir()));
  HVX_RETURN_IF_ERROR(expand("data.fashion_mnist_source.output_dir", s->mutable_output_dir()));
  HVX_RETURN_IF_ERROR(expand("checkpoint.dir", config->mutable_checkpoint()->mutable_dir()));
  HVX_RETURN_IF_ERROR(expand("summaries_dir", config->mutable_summaries_dir()));
  HVX_RETURN_IF_ERROR(
      expand("logging.metrics_file", config->mutable_logging()->mutable_metrics_file()));
  HVX_RETURN_IF_ERROR(
      expand("engine.timeline_path", config->mutable_engine()->mutable_timeline_path()));
  return absl::OkStatus();
}

absl::Status RebaseDataFiles(absl::string_view dir, DataConfig* data) {
  if (dir.empty()) return absl::InvalidArgumentError("--data_dir is empty");
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  auto rebase = [dir](absl::string_view field, std::string* patterns) {
    return RewriteFilePatterns(patterns, [&](std::string* part) -> absl::Status {
      const size_t slash = part->rfind('/');
      const std::string name = slash == std::string::npos ? *part : part->substr(slash + 1);
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--data_dir: ", field, " pattern \"", *part,
                                                       "\" names a folder, not files"));
      }
      *part = absl::StrCat(dir, dir == "/" ? "" : "/", name);
      return absl::OkStatus();
    });
  };
  HVX_RETURN_IF_ERROR(rebase("data.train_files", data->mutable_train_files()));
  HVX_RETURN_IF_ERROR(rebase("data.eval_files", data->mutable_eval_files()));
  if (data->has_fashion_mnist_source() && !data->fashion_mnist_source().output_dir().empty()) {
    data->mutable_fashion_mnist_source()->set_output_dir(std::string(dir));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveConfigPath(absl::string_view name,
                                              const ConfigSearchPath& search) {
  if (name.empty()) return absl::InvalidArgumentError("--config is empty; name a .pbtxt file");
  HVX_ASSIGN_OR_RETURN(const std::string expanded, ExpandHome(name, search.home));
  if (expanded[0] == '/') {
    if (FileExists(expanded)) return expanded;
    return absl::NotFoundError(absl::StrCat("config file ", expanded, " does not exist"));
  }
  std::vector<std::string> tried;
  for (const std::string& dir : {search.working_dir, search.bundled_dir}) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", expanded);
    if (FileExists(candidate)) return candidate;
    tried.push_back(std::move(candidate));
  }
  if (search.working_dir.empty() && FileExists(expanded)) return expanded;
  return absl::NotFoundError(
      absl::StrCat("config \"", name, "\" not found; tried ", absl::StrJoin(tried, ", ")));
}

absl::StatusOr<TrainConfig> ParseTrainConfig(absl::string_view text, absl::string_view source) {
  TrainConfig config;
  TextFormat::ParseInfoTree tree;
  HVX_RETURN_IF_ERROR(ParseInto(text, source, /*merge=*/false, &config, &tree));
  return config;
}

void FillDefaults(TrainConfig* c) {
  if (c->model().num_classes() == 0) c->mutable_model()->set_num_classes(10);
  DataConfig* d = c->mutable_data();
  if (d->eval_batch_size() == 0) d->set_eval_batch_size(d->batch_size());
  if (d->reader_threads() == 0) d->set_reader_threads(1);
  if (d->decode_threads() == 0) d->set_decode_threads(1);
  if (d->prefetch_batches() == 0) d->set_prefetch_batches(4);
  if (d->image_size() == 0) d->set_image_size(224);
  FashionMnistSource* s = d->mutable_fashion_mnist_source();
  if (s->num_train_shards() == 0) s->set_num_train_shards(4);
  if (s->num_test_shards() == 0) s->set_num_test_shards(1);
  if (s->idx_dir().empty()) s->set_idx_dir("/usr/share/datasets/fashion-mnist");
  if (d->format() == EXAMPLE) {
    ExampleSpec* x = d->mutable_example();
    if (x->label_key().empty()) x->set_label_key("label");
    if (x->input().divide_by() == 0) x->mutable_input()->set_divide_by(1);
  }
  OptimizerConfig* o = c->mutable_optimizer();
  if (o->beta1() == 0) o->set_beta1(0.9);
  if (o->beta2() == 0) o->set_beta2(0.999);
  if (o->eps() == 0) o->set_eps(1e-8);
  if (o->reference_batch() == 0) o->set_reference_batch(256);
  if (o->step_gamma() == 0) o->set_step_gamma(0.1);
  if (o->backward_passes_per_step() == 0) o->set_backward_passes_per_step(1);
  EngineConfig* e = c->mutable_engine();
  if (e->gradient_predivide_factor() == 0) e->set_gradient_predivide_factor(1.0);
  LoggingConfig* l = c->mutable_logging();
  if (l->log_every_steps() == 0) l->set_log_every_steps(50);
  if (l->eval_every_epochs() == 0) l->set_eval_every_epochs(1);
  CheckpointConfig* k = c->mutable_checkpoint();
  if (k->every_epochs() == 0) k->set_every_epochs(1);
  if (k->keep() == 0) k->set_keep(3);
  if (!k->has_resume()) k->set_resume(true);
  if (c->launch().num_processes().empty()) c->mutable_launch()->set_num_processes("1");
  if (c->device().empty()) c->set_device("auto");
}

absl::Status ValidateTrainConfig(const TrainConfig& config, absl::string_view source) {
  const std::vector<FieldError> errors = CheckConfig(config);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", errors[0].field, ": ", errors[0].message));
}

absl::StatusOr<TrainConfig> TrainConfigFromText(absl::string_view text, absl::string_view path,
                                                const std::vector<std::string>& overrides,
                                                const std::string& home) {
  TrainConfig config;
  // Locations of every parse, file first, so an error points at the text that set the value last.
  std::vector<std::pair<std::string, std::unique_ptr<TextFormat::ParseInfoTree>>> parses;
  parses.emplace_back(std::string(path), std::make_unique<TextFormat::ParseInfoTree>());
  HVX_RETURN_IF_ERROR(ParseInto(text, path, false, &config, parses.back().second.get()));
  for (size_t i = 0; i < overrides.size(); ++i) {
    std::string source = absl::StrCat("--override #", i + 1);
    parses.emplace_back(source, std::make_unique<TextFormat::ParseInfoTree>());
    HVX_RETURN_IF_ERROR(
        ParseInto(overrides[i], source, /*merge=*/true, &config, parses.back().second.get()));
  }
  FillDefaults(&config);
  HVX_RETURN_IF_ERROR(Annotate(ExpandConfigPaths(home, &config), path));
  const std::vector<FieldError> errors = CheckConfig(config);
  if (errors.empty()) return config;
  const FieldError& error = errors[0];
  for (auto it = parses.rbegin(); it != parses.rend(); ++it) {
    int line = 0, column = 0;
    if (FindLocation(*it->second, TrainConfig::descriptor(), error.field, &line, &column)) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->first, ":", line, ":", column, ": ", error.field, ": ", error.message));
    }
  }
  // Unset in every source: the problem is a missing field.
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", error.field, ": ", error.message));
}

absl::StatusOr<LoadedConfig> LoadTrainConfig(absl::string_view name, const ConfigSearchPath& search,
                                             const std::vector<std::string>& overrides) {
  LoadedConfig loaded;
  HVX_ASSIGN_OR_RETURN(loaded.path, ResolveConfigPath(name, search));
  HVX_ASSIGN_OR_RETURN(const std::string text, ReadFile(loaded.path));
  HVX_ASSIGN_OR_RETURN(loaded.config,
                       TrainConfigFromText(text, loaded.path, overrides, search.home));
  return loaded;
}

bool HasJpegInput(const DataConfig& data) {
  return data.format() == IMAGENET ||
         (data.format() == EXAMPLE && data.example().input().kind() == FeatureSpec::JPEG);
}

std::vector<std::string> SplitFilePatterns(absl::string_view patterns) {
  std::vector<std::string> result;
  for (absl::string_view pattern : absl::StrSplit(patterns, ',', absl::SkipWhitespace())) {
    result.emplace_back(absl::StripAsciiWhitespace(pattern));
  }
  return result;
}

}  // namespace train
}  // namespace hvx
