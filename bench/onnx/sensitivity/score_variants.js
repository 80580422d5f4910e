// SPDX-License-Identifier: MIT
// Runs every model of a qdq_variants.py folder in ONNX Runtime on the given single-input .npy
// samples and prints "<mean cosine of output 0 vs the float model> <index line>" per variant.
//   QUARK_ORT_DIR=.cache/ort node score_variants.js FLOAT.onnx VARIANT_DIR x1.npy [x2.npy ...]
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.resolve(process.env.QUARK_ORT_DIR || '.cache/ort', 'node_modules',
                              'onnxruntime-node'));

function loadNpyF32(file) {
  const b = fs.readFileSync(file);
  const hl = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + hl).toString();
  if (!header.includes("'<f4'")) throw new Error(file + ': expected float32 .npy');
  const shape = header.match(/\((.*?)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const bytes = b.subarray(10 + hl);
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  return new ort.Tensor('float32', data, shape);
}

function cosine(a, b) {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; ++i) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb);
}

(async () => {
  const [floatModel, dir, ...files] = process.argv.slice(2);
  const opts = {graphOptimizationLevel: 'disabled', logSeverityLevel: 3};
  const run = async (sess, x) => Object.values(await sess.run({[sess.inputNames[0]]: x}))[0].data;
  const xs = files.map(loadNpyF32);
  const ref = await ort.InferenceSession.create(floatModel, opts);
  const want = [];
  for (const x of xs) want.push(await run(ref, x));
  for (const line of fs.readFileSync(path.join(dir, 'index.txt'), 'utf8').trim().split('\n')) {
    const sess = await ort.InferenceSession.create(path.join(dir, line.split(' ')[0] + '.onnx'), opts);
    let sum = 0;
    for (let i = 0; i < xs.length; ++i) sum += cosine(want[i], await run(sess, xs[i]));
    console.log((sum / xs.length).toFixed(5), line);
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
