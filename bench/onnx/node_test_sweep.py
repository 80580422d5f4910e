#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Robustness sweep: quantize every ONNX node test model and run the result in ONNX Runtime.

For each folder of the ONNX backend test data (Debian libonnx-testdata:
/usr/share/libonnx-testdata/data/node/<test>/model.onnx + test_data_set_0/input_N.pb), the
script writes the test's inputs as one calibration sample (.npy), runs

    quark_quantize model.onnx q.onnx --calib-data <sample> [--preset NAME] -q --no-summary

and sorts the outcome into:
  ok                  quantized; ONNX Runtime 1.30 loads and runs q.onnx
  error               quark_quantize exited 1 with a message (an unsupported op, a bad input...)
  ORTFAIL             quantized, but ONNX Runtime refuses or fails q.onnx while it runs the
                      float model: a defect (a model quark-cpp should not have written)
  SHAPE               quantized and run, but an output's shape is not the expected one: a
                      defect (quantization changed a shape, e.g. a quantized Range limit)
  EVALFAIL            (--runner quark) quantized, but comparing it with the float model failed
                      (another output size, an output eval cannot measure): a defect
  ortfail-float-too   ONNX Runtime cannot run the float model either (ORT's own gaps)
  noinput             the test's inputs cannot be written as .npy (strings, sequences, ...)
  CRASH / timeout     quark_quantize died on a signal or ran 120 s: a defect
  error+LEFTFILE      a failed run left an output file behind: a defect
For the ok models it also prints the largest error of q.onnx's outputs (in ORT) against the
test's expected outputs, relative to the largest |expected| value: the quantization error, a
few percent for int8 on most ops; large values point at ops that quantization hurts by nature
(Softmax of large numbers) or at defects worth a look.

--runner quark is for the block presets (BFP16, MX*, BF16_MIXED_*), whose com.amd.quark nodes ORT
has no kernels for: quark_quantize runs the float and the quantized model in quark-cpp's runtime
on the sample (--eval 1), so ok means "quantized and ran", and it carries the cosine similarity
of output 0 against the float model ('nan' when output 0 is not compared, e.g. an integer output).

Needs /usr/bin/python3 with numpy and onnx (Debian python3-numpy, python3-onnx), node, and ONNX
Runtime for Node in .cache/ort (scripts/install-deps.sh). Not part of CI: about 1 s per model.

    bench/onnx/node_test_sweep.py build/release/examples/onnx/quark_quantize OUT_DIR [PRESET]
        [--data /usr/share/libonnx-testdata/data/node] [--only SUBSTRING] [--runner ort|quark]

PRESET may be a configuration file instead (a name ending in .json, passed as --config).

Results: OUT_DIR/results.json (test -> [outcome, message]); docs/bench/robustness.md has the
runs recorded so far.
"""
import argparse
import collections
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, '..', '..'))


class OrtServer:
    """tests/ort/ort_run.js --serve: one node child for every run."""

    def __init__(self):
        env = dict(os.environ)
        env.setdefault('QUARK_ORT_DIR', os.path.join(ROOT, '.cache', 'ort'))
        self.p = subprocess.Popen(['node', os.path.join(ROOT, 'tests', 'ort', 'ort_run.js'),
                                   '--serve'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env)

    def run(self, args):
        """'' on success, else ORT's message."""
        self.p.stdin.write((json.dumps(args) + '\n').encode())
        self.p.stdin.flush()
        line = self.p.stdout.readline().decode().strip()
        if line == 'ok':
            return ''
        if line.startswith('error '):
            return self.p.stdout.read(int(line[6:])).decode(errors='replace')
        raise RuntimeError('ort_run.js --serve: unexpected reply %r' % line)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, 'rb') as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def sweep_one(quantizer, preset, test_dir, work, ort, runner='ort'):
    name = os.path.basename(test_dir)
    model_path = os.path.join(test_dir, 'model.onnx')
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        m = onnx.load(model_path)
    except Exception as e:  # noqa: BLE001 - any load failure is reported
        return 'noinput', 'onnx.load: %s' % e
    inits = {i.name for i in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits]
    sample = os.path.join(work, 'cal', 's0')
    os.makedirs(sample)
    npys = []
    for k, vi in enumerate(inputs):
        pb = os.path.join(test_dir, 'test_data_set_0', 'input_%d.pb' % k)
        try:
            a = read_pb(pb)
            if a.dtype.kind not in 'biuf':
                return 'noinput', 'input %s is %s' % (vi.name, a.dtype)
            f = os.path.join(sample, vi.name + '.npy')
            np.save(f, a)
        except Exception as e:  # noqa: BLE001
            return 'noinput', str(e)[:200]
        npys.append(f)
    out = os.path.join(work, 'q.onnx')
    cmd = [quantizer, model_path, out, '--calib-data', os.path.join(work, 'cal'), '--no-summary']
    # --runner quark: quark_quantize itself runs the float and the quantized model in quark-cpp's
    # runtime on the sample (--eval 1) and prints the cosine similarity of output 0.
    cmd += ['--eval', '1'] if runner == 'quark' else ['-q']
    if preset.endswith('.json'):
        cmd += ['--config', preset]
    elif preset:
        cmd += ['--preset', preset]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return 'timeout', ' '.join(cmd)
    err = p.stderr.decode(errors='replace').strip()
    if p.returncode < 0 or p.returncode >= 128:
        return 'CRASH', 'exit %d: %s' % (p.returncode, err[-400:])
    if p.returncode != 0:
        left = [f for f in os.listdir(work) if f.startswith('q.onnx')]
        if left:
            return 'error+LEFTFILE', err[-400:]
        # --runner quark: the model was quantized, but comparing it with the float model failed
        # (another output size, a type eval cannot measure): a defect like ORTFAIL.
        return ('EVALFAIL' if 'quark.eval.' in err else 'error'), err[-400:]
    if not os.path.exists(out):
        return 'CRASH', 'exit 0 without an output file'
    if runner == 'quark':
        nq = sum(1 for n in onnx.load(out).graph.node if n.domain == 'com.amd.quark' or
                 n.op_type in ('QuantizeLinear', 'Cast'))
        cos = [ln.split(':')[1].strip() for ln in p.stdout.decode(errors='replace').splitlines()
               if ln.startswith('Mean cos similarity:')]
        return 'ok', '%s %d' % (cos[0] if cos else 'nan', nq)
    q_out = os.path.join(work, 'ort_q')
    os.makedirs(q_out)
    e = ort.run([out, q_out] + npys)
    if e:
        f_out = os.path.join(work, 'ort_float')
        os.makedirs(f_out)
        return ('ortfail-float-too' if ort.run([model_path, f_out] + npys) else 'ORTFAIL'), e[:600]
    # Largest error against the expected outputs, relative to the largest |expected|.
    worst = 0.0
    for i, o in enumerate(m.graph.output):
        pb = os.path.join(test_dir, 'test_data_set_0', 'output_%d.pb' % i)
        got_f = os.path.join(q_out, o.name + '.npy')
        if not os.path.exists(pb) or not os.path.exists(got_f):
            continue
        try:
            want = read_pb(pb)
        except Exception:  # noqa: BLE001 - outputs numpy cannot hold are not compared
            continue
        got = np.load(got_f)
        if got.shape != want.shape:
            return 'SHAPE', 'output %s: %s, expected %s' % (o.name, got.shape, want.shape)
        if want.dtype.kind not in 'f':
            continue
        w = want.astype(np.float64)
        g = got.astype(np.float64)
        fin = np.isfinite(w) & np.isfinite(g)
        if fin.any():
            scale = np.max(np.abs(w[fin])) or 1.0
            worst = max(worst, float(np.max(np.abs(g[fin] - w[fin])) / scale))
    nq = sum(1 for n in onnx.load(out).graph.node if n.op_type in ('QuantizeLinear', 'Cast'))
    return 'ok', '%.4f %d' % (worst, nq)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('quantizer')
    ap.add_argument('out_dir')
    ap.add_argument('preset', nargs='?', default='')
    ap.add_argument('--data', default='/usr/share/libonnx-testdata/data/node')
    ap.add_argument('--only', default='')
    ap.add_argument('--runner', choices=('ort', 'quark'), default='ort',
                    help='run the quantized model in ONNX Runtime (default) or, for the block '
                    'presets whose com.amd.quark nodes ORT cannot run, in quark-cpp\'s runtime '
                    '(quark_quantize --eval 1: ok then carries the cosine similarity of output 0 '
                    'against the float model instead of the error against the expected outputs)')
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    ort = OrtServer() if a.runner == 'ort' else None
    results = {}
    for model in sorted(glob.glob(os.path.join(a.data, '*', 'model.onnx'))):
        test_dir = os.path.dirname(model)
        name = os.path.basename(test_dir)
        if a.only and a.only not in name:
            continue
        results[name] = sweep_one(os.path.abspath(a.quantizer), a.preset, test_dir,
                                  os.path.join(a.out_dir, name), ort, a.runner)
    with open(os.path.join(a.out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    counts = collections.Counter(v[0] for v in results.values())
    print('preset %s: %s' % (a.preset or '(default)', dict(sorted(counts.items()))))
    for name, (outcome, msg) in sorted(results.items()):
        if outcome in ('ORTFAIL', 'SHAPE', 'EVALFAIL', 'CRASH', 'timeout', 'error+LEFTFILE'):
            print('%s %s: %s' % (outcome, name, msg.splitlines()[0] if msg else ''))
    oks = sorted(((float(m.split()[0]), n) for n, (o, m) in results.items() if o == 'ok'
                  and m.split()[0] != 'nan'), reverse=(a.runner == 'ort'))
    if a.runner == 'ort':
        print('largest relative output errors (quantized, ORT, vs the expected outputs):')
    else:
        undefined = sum(1 for o, m in results.values() if o == 'ok' and m.split()[0] == 'nan')
        print('lowest cosine similarities (quantized vs float, quark-cpp runtime, output 0; '
              '%d more undefined: an all-zero or empty output):' % undefined)
    for err, name in oks[:10]:
        print('  %.4f %s' % (err, name))
    refusals = collections.Counter()
    for outcome, msg in results.values():
        if outcome == 'error' and 'does not implement: ' in msg:
            for op in msg.split('does not implement: ')[1].split(' (graph')[0].split(', '):
                refusals[op] += 1
    print('ops the runtime refused (models): %s' % ', '.join(
        '%s %d' % kv for kv in refusals.most_common()))
    return 1 if any(v[0] in ('ORTFAIL', 'SHAPE', 'EVALFAIL', 'CRASH', 'timeout', 'error+LEFTFILE')
                    for v in results.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
