// SPDX-License-Identifier: MIT
// quark_render_text: writes rendered-text images as a calibration or evaluation folder, the same
// images the PaddleOCR accuracy test uses (tests/support/text_images.hpp): DejaVu words from the
// committed glyph atlas, normalised as PaddleOCR's detection ("page") or direction classifier
// ("line") preprocess them.
//
//   quark_render_text line 48 192 8 calib          # seeds 0-7  -> calib/s00/x.npy ... s07/x.npy
//   quark_render_text line 48 192 16 eval --seed 100
//
// Each sample is a [1, 3, H, W] float32 .npy named after the input ("x" unless --input says
// otherwise), one sub-folder per sample: the layout `quark_quantize --calib-data` reads.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "support/text_images.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{
      "Write rendered-text images (the PaddleOCR test's) as a folder of .npy samples.\n"
      "page: 3-7 lines of text, ImageNet mean/std (detection); line: one text line, "
      "(x/255-0.5)/0.5, zero right padding, turned 180 degrees on odd seeds (classifier)."};
  std::string kind, out, input = "x";
  std::size_t h = 0, w = 0;
  std::uint32_t n = 0, seed = 0;
  app.add_option("KIND", kind, "page or line")->required()->check(CLI::IsMember({"page", "line"}));
  app.add_option("H", h, "image height")->required()->check(CLI::Range(8, 4096));
  app.add_option("W", w, "image width")->required()->check(CLI::Range(8, 4096));
  app.add_option("N", n, "number of images")->required()->check(CLI::Range(1, 100000));
  app.add_option("OUT", out, "folder to write (created; s00/x.npy, s01/x.npy, ...)")->required();
  app.add_option("--seed", seed, "seed of the first image (the others follow: seed+1, ...)");
  app.add_option("--input", input, "file name of each sample (the model's input name)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
      throw std::runtime_error("cannot create folder '" + out + "'");
    // s00, s01, ... with as many digits as the last index needs (at least two).
    const std::size_t digits = std::max<std::size_t>(2, std::to_string(n - 1).size());
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::vector<float> x = kind == "page" ? quark::test::page_image(h, w, seed + k)
                                                  : quark::test::line_image(h, w, seed + k);
      std::string name = std::to_string(k);
      name.insert(0, digits - name.size(), '0');
      const fs::path dir = fs::path(out) / ("s" + name);
      fs::create_directories(dir);
      quark::test::write_npy((dir / (input + ".npy")).string(),
                             quark::test::npy_array::from(x, {1, 3, h, w}));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quark_render_text: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
