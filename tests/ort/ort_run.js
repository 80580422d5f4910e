// SPDX-License-Identifier: MIT
// ONNX Runtime oracle runner for the quark test suite.
//
//   node ort_run.js model.onnx out_dir in1.npy [in2.npy ...]
//
// Binds the .npy files to the graph inputs in graph order, runs the model once on the CPU
// execution provider with graph optimizations disabled, and writes every output as
// out_dir/<output_name>.npy. Output bytes are copied verbatim from ORT's buffers (no NaN
// canonicalisation), so NaN sign and payload stay visible. int4/uint4 outputs would be written
// unpacked, one element per byte, as |i1 / |u1, but onnxruntime-node 1.30 crashes when it returns
// them, so graphs with such outputs are refused (cast them to int8 inside the graph). The Node
// binding cannot describe float8/bfloat16/float4/e8m0 graph inputs or outputs at all ("Unsupported
// data type"). Exit status: 0 on success, 1 on any error (message on stderr).
//
//   node ort_run.js --serve
//
// Serves runs for one test process (tests/support/ort.hpp keeps one such child): each line on
// stdin is a JSON array of the arguments above (or ["--ping"]: load onnxruntime-node only); each
// reply on stdout is "ok" or "error N" followed by N bytes of message. Runs are served in order.
//
// onnxruntime-node is resolved from $QUARK_ORT_DIR/node_modules first, then the normal Node
// module path. Supported .npy element types: f4 f2 i1 u1 i2 u2 i4 u4 i8, and b1 (as an ORT bool tensor).
'use strict';

const fs = require('fs');
const path = require('path');

let ortModule = null;

function loadOrt() {
  if (ortModule === null) ortModule = loadOrtOnce();
  return ortModule;
}

function loadOrtOnce() {
  const tried = [];
  if (process.env.QUARK_ORT_DIR) {
    // resolve(): require() takes a relative path without './' for a package name.
    const p = path.resolve(process.env.QUARK_ORT_DIR, 'node_modules', 'onnxruntime-node');
    tried.push(p);
    if (fs.existsSync(p)) return require(p);
  }
  try {
    return require('onnxruntime-node');
  } catch (e) {
    tried.push('onnxruntime-node (node module path)');
    throw new Error('cannot load onnxruntime-node; tried: ' + tried.join(', ') +
                    '. Install it with: npm install --prefix "$QUARK_ORT_DIR" onnxruntime-node@1.30');
  }
}

// npy descr -> [ORT tensor type, typed array constructor]
const NPY_TO_ORT = {
  '<f4': ['float32', Float32Array],
  '<f2': ['float16', Uint16Array],
  '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array],
  '<i2': ['int16', Int16Array],
  '<u2': ['uint16', Uint16Array],
  '<i4': ['int32', Int32Array],
  '<u4': ['uint32', Uint32Array],
  '<i8': ['int64', BigInt64Array],
};
// ORT tensor type -> npy descr
const ORT_TO_NPY = {
  float32: '<f4', float16: '<f2', int8: '|i1', uint8: '|u1', int16: '<i2', uint16: '<u2',
  int32: '<i4', uint32: '<u4', int64: '<i8', bool: '|u1', int4: '|i1', uint4: '|u1',
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    throw new Error(file + ': not an .npy file');
  }
  const major = buf.readUInt8(6);
  let hlen, off;
  if (major === 1) { hlen = buf.readUInt16LE(8); off = 10; }
  else if (major === 2 || major === 3) { hlen = buf.readUInt32LE(8); off = 12; }
  else throw new Error(file + ': unsupported .npy version ' + major);
  const header = buf.toString('latin1', off, off + hlen);
  const descrM = header.match(/'descr'\s*:\s*'([^']+)'/);
  const shapeM = header.match(/'shape'\s*:\s*\(([^)]*)\)/);
  if (!descrM || !shapeM) throw new Error(file + ': malformed header: ' + header);
  if (/'fortran_order'\s*:\s*True/.test(header)) throw new Error(file + ': fortran order');
  let descr = descrM[1];
  const isBool = descr === '|b1';  // fed as an ORT 'bool' tensor over its bytes
  if (isBool) descr = '|u1';
  if (descr === '<i1' || descr === '<u1') descr = '|' + descr.slice(1);
  const shape = shapeM[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const entry = NPY_TO_ORT[descr];
  if (!entry) throw new Error(file + ': unsupported dtype ' + descr);
  const [npyType, Ctor] = entry;
  const type = isBool ? 'bool' : npyType;
  const count = shape.reduce((a, b) => a * b, 1);
  const start = off + hlen;
  const nbytes = count * Ctor.BYTES_PER_ELEMENT;
  if (buf.length < start + nbytes) throw new Error(file + ': truncated data');
  // Copy into a fresh, aligned ArrayBuffer.
  const ab = new ArrayBuffer(nbytes);
  new Uint8Array(ab).set(buf.subarray(start, start + nbytes));
  return { type, data: new Ctor(ab), shape };
}

function writeNpy(file, descr, shape, bytes) {
  const dims = shape.map(String);
  const shapeStr = dims.length === 1 ? '(' + dims[0] + ',)' : '(' + dims.join(', ') + ')';
  let header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shapeStr + ', }';
  const unpadded = 10 + header.length + 1;
  header += ' '.repeat((64 - (unpadded % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.writeUInt8(0x93, 0);
  pre.write('NUMPY', 1, 'latin1');
  pre.writeUInt8(1, 6);
  pre.writeUInt8(0, 7);
  pre.writeUInt16LE(header.length, 8);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), bytes]));
}

// Raw bytes of an output tensor, element per byte for int4/uint4.
function outputBytes(t) {
  const count = t.dims.reduce((a, b) => a * b, 1);
  const d = t.data;
  const raw = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  if (t.type !== 'int4' && t.type !== 'uint4') return Buffer.from(raw);  // copy
  // The binding hands sub-byte tensors over packed (element 0 in the low nibble) or, in some
  // versions, already unpacked; accept both.
  const out = Buffer.alloc(count);
  const packed = raw.length === Math.ceil(count / 2) && count > 1;
  for (let i = 0; i < count; ++i) {
    let v = packed ? (raw[i >> 1] >> ((i & 1) * 4)) & 0xf : raw[i] & 0xf;
    if (t.type === 'int4' && v >= 8) v -= 16;
    out[i] = v & 0xff;
  }
  return out;
}

async function runOnce(args) {
  if (args.length === 1 && args[0] === '--ping') {
    loadOrt();
    return;
  }
  if (args.length < 2) {
    throw new Error('usage: node ort_run.js model.onnx out_dir [in1.npy ...]');
  }
  const [modelPath, outDir, ...inputs] = args;
  const ort = loadOrt();
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'disabled',
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
  });
  // ORT 1.30's Node binding aborts the process (V8 "out of memory") when it hands back an int4 or
  // uint4 output, so refuse such graphs with a clear message instead.
  if (process.env.QUARK_ORT_ALLOW_INT4_OUTPUT !== '1') {
    for (const m of session.outputMetadata) {
      if (m.isTensor && (m.type === 'int4' || m.type === 'uint4')) {
        throw new Error('graph output ' + m.name + ' is ' + m.type + ': onnxruntime-node 1.30 ' +
                        'crashes on int4/uint4 outputs; add Cast(to=INT8) inside the graph ' +
                        '(set QUARK_ORT_ALLOW_INT4_OUTPUT=1 to try anyway)');
      }
    }
  }
  if (inputs.length !== session.inputNames.length) {
    throw new Error('model has ' + session.inputNames.length + ' inputs (' +
                    session.inputNames.join(', ') + ') but ' + inputs.length + ' .npy files given');
  }
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const a = readNpy(inputs[i]);
    feeds[name] = new ort.Tensor(a.type, a.data, a.shape);
  });
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of session.outputNames) {
    const t = results[name];
    const descr = ORT_TO_NPY[t.type];
    if (!descr) throw new Error('output ' + name + ' has unsupported type ' + t.type);
    writeNpy(path.join(outDir, name + '.npy'), descr, t.dims, outputBytes(t));
  }
}

function serve() {
  const readline = require('readline');
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  let chain = Promise.resolve();
  rl.on('line', (line) => {
    chain = chain.then(async () => {
      try {
        await runOnce(JSON.parse(line));
        process.stdout.write('ok\n');
      } catch (e) {
        const msg = Buffer.from('ort_run.js: ' + (e && e.stack ? e.stack : String(e)), 'utf8');
        process.stdout.write('error ' + msg.length + '\n');
        process.stdout.write(msg);
      }
    });
  });
}

if (process.argv[2] === '--serve') {
  serve();
} else {
  runOnce(process.argv.slice(2)).catch((e) => {
    process.stderr.write('ort_run.js: ' + (e && e.stack ? e.stack : String(e)) + '\n');
    process.exit(1);
  });
}
