// SPDX-License-Identifier: MIT
// ONNX Runtime (onnxruntime-node) timing loop for docs/bench/runtime.md, on the same inputs as
// bench/onnx/runtime_bench.cpp:
//   node bench/onnx/ort_time.js <model.onnx> <N,C,H,W> [threads=2] [seconds=3]
// The input is the same synthetic document page (light paper, dark word blocks, [-1, 1]); the
// exact pixels differ (JS RNG), which does not change the cost of these convolutional models.
// Prints the mean and the median time per inference after 3 warm-up runs.
'use strict';
const path = require('path');
const fs = require('fs');
function loadOrt() {
  const dir = process.env.QUARK_ORT_DIR || path.join(__dirname, '..', '..', '.cache', 'ort');
  const p = path.join(dir, 'node_modules', 'onnxruntime-node');
  return require(fs.existsSync(p) ? p : 'onnxruntime-node');
}
async function main() {
  const [model, dimsArg, threadsArg, secondsArg] = process.argv.slice(2);
  const dims = dimsArg.split(',').map(Number);
  const threads = Number(threadsArg || 2);
  const seconds = Number(secondsArg || 3);
  const ort = loadOrt();
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionProviders: ['cpu'],
  });
  const [n, c, h, w] = dims;
  const data = new Float32Array(n * c * h * w);
  let seed = 1;
  const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  for (let i = 0; i < data.length; ++i) data[i] = 0.85 + (rnd() - 0.5) * 0.1;
  for (let y0 = 16; y0 + 14 < h; y0 += 32) {
    for (let x0 = 12; x0 < w - 12;) {
      const len = 8 + Math.floor(rnd() * 33);
      for (let y = y0; y < y0 + 12; ++y)
        for (let x = x0; x < Math.min(w - 4, x0 + len); ++x)
          if ((Math.floor((x - x0) / 2) % 2 === 0) || ((y - y0) % 5 === 0))
            for (let ch = 0; ch < c; ++ch) data[ch * h * w + y * w + x] = -0.8 + (rnd() - 0.5) * 0.1;
      x0 += len + 10;
    }
  }
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, dims)};
  for (let i = 0; i < 3; ++i) await session.run(feeds);
  const times = [];
  const cpu0 = process.cpuUsage();
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end || times.length < 5) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const cpu = process.cpuUsage(cpu0);
  const cpuMs = (cpu.user + cpu.system) / 1000 / times.length;
  times.sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  console.log(`${path.basename(model)} ${dims.join('x')} threads=${threads}: ` +
              `mean ${mean.toFixed(2)} ms, median ${times[times.length >> 1].toFixed(2)} ms ` +
              `process CPU ${cpuMs.toFixed(2)} ms/run over ${times.length} runs (onnxruntime-node ${require(path.join(path.dirname(require.resolve(
                  path.join(process.env.QUARK_ORT_DIR || path.join(__dirname, '..', '..', '.cache', 'ort'),
                            'node_modules', 'onnxruntime-node'))), '..', 'package.json')).version})`);
}
main().catch((e) => { console.error(e); process.exit(1); });
