#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Mutation sweep: malformed attributes and inputs for the runtime's newer operators.

Takes the ONNX node test models (Debian libonnx-testdata:
/usr/share/libonnx-testdata/data/node/<test>/model.onnx + test_data_set_0/input_N.pb) whose
graph holds one of the op types of onnx_frontend/src/runtime/ops_{index,einsum,detection,rnn,
control,signal,loss,misc,pool,conv}.cpp, writes mutated copies and runs

    quark_quantize mutant.onnx q.onnx --preset A8W8 --calib-data <dir> -q --no-summary

on each (the runtime runs the mutant to calibrate). Mutations:
  attr       an attribute of the op's node set out of range: -1, 0, 2**40, -2**40, a list
             emptied / one shorter / one longer / all negative / all huge, a float NaN / -1 /
             1e30, a string 'bogus'; an attribute of the wrong type (an int as a list or a
             string...); pairs of such changes; common attributes the node lacks (axis,
             group, ...) added as 0 / 2**40 / -2**40
  index      an int initializer or Constant (indices, axes, k, shapes...) pushed out of range
             (2**40, -2**40, +1000, -1000) or given an extra / no dimension
  input      a calibration input given rank +1 / rank -1 / a dimension 0 / another element
             type, integer inputs pushed out of range, float inputs filled with NaN / Inf (the
             model's declared input, value_info and output shapes are cleared so the bad shapes
             reach the operator)
Outcomes:
  ok       exit 0
  error    exit 1 with 'quark_quantize: error: quark.<id>: ...' (a clear error: fine)
  DEFECT   anything else: a signal, a sanitizer report, a timeout, another exit code, or an
           exception that is not the project's (std::bad_alloc, vector::_M_range_check, ...)

Build the tool with ASan + UBSan (docs/bench/robustness.md, session 27, has the command), then

    bench/onnx/mutation_sweep.py /work/fuzzbuild/examples/onnx/quark_quantize OUT_DIR
        [--per-model 6] [--models-per-op 3] [--limit N] [--only SUBSTRING] [--jobs 2]
        [--seed 1] [--timeout 20] [--ops "Split Slice ..."]

The choice of mutants is deterministic for one --seed. Results: OUT_DIR/results.json.
"""
import argparse
import collections
import concurrent.futures
import copy
import glob
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPS = set('''
ArgMax ArgMin TopK Hardmax NonZero GatherElements GatherND Scatter ScatterElements ScatterND
OneHot Compress Trilu CumSum ReverseSequence EyeLike Unique
Einsum
NonMaxSuppression RoiAlign
RNN GRU LSTM
If Loop Scan
DFT STFT HannWindow HammingWindow BlackmanWindow MelWeightMatrix
NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss
Dropout Mod Mean CastLike IsInf IsNaN Shrink BitShift
MaxPool AveragePool LpPool MaxUnpool GlobalAveragePool GlobalMaxPool GlobalLpPool
Conv ConvTranspose
'''.split())

HUGE = 2**40
# Attributes added (as HUGE) to a node that lacks them, per op.
EXTRA_ATTRS = {
    'ArgMax': ['axis'], 'ArgMin': ['axis'], 'Hardmax': ['axis'], 'TopK': ['axis'],
    'GatherElements': ['axis'], 'ScatterElements': ['axis'], 'Scatter': ['axis'],
    'GatherND': ['batch_dims'], 'OneHot': ['axis'], 'Compress': ['axis'],
    'ReverseSequence': ['batch_axis', 'time_axis'], 'EyeLike': ['k'], 'Unique': ['axis'],
    'RNN': ['hidden_size'], 'GRU': ['hidden_size'], 'LSTM': ['hidden_size'],
    'DFT': ['axis'], 'NegativeLogLikelihoodLoss': ['ignore_index'],
    'SoftmaxCrossEntropyLoss': ['ignore_index'], 'Conv': ['group'], 'ConvTranspose': ['group'],
    'MaxPool': ['storage_order'], 'RoiAlign': ['output_height', 'sampling_ratio'],
    'LpPool': ['p'], 'GlobalLpPool': ['p'], 'Scan': ['num_scan_inputs'],
}


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, 'rb') as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def target_node(m):
    for n in m.graph.node:
        if n.op_type in OPS:
            return n
    return None


def attr_mutations(node):
    """(label, value) pairs for the node's attributes."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.INT:
            for v in (-1, 0, HUGE, -HUGE, a.i + 7):
                out.append(('attr %s=%d' % (a.name, v), a.name, v))
        elif a.type == onnx.AttributeProto.INTS:
            ints = list(a.ints)
            cands = [[], ints + [1], [-1] * max(1, len(ints)), [HUGE] * max(1, len(ints)),
                     [0] * max(1, len(ints))]
            if len(ints) >= 2:
                cands.append(ints[:-1])
            for v in cands:
                out.append(('attr %s=%s' % (a.name, v), a.name, v))
        elif a.type == onnx.AttributeProto.FLOAT:
            for v in (float('nan'), -1.0, 1e30):
                out.append(('attr %s=%r' % (a.name, v), a.name, v))
        elif a.type == onnx.AttributeProto.FLOATS:
            for v in ([], list(a.floats) + [1.0], [float('nan')] * max(1, len(a.floats))):
                out.append(('attr %s=%r' % (a.name, v), a.name, v))
        elif a.type == onnx.AttributeProto.STRING:
            out.append(('attr %s=bogus' % a.name, a.name, 'bogus'))
            out.append(('attr %s=""' % a.name, a.name, ''))
        # the wrong attribute type: an int as a list, a list as an int, a number as a string
        if a.type == onnx.AttributeProto.INT:
            out.append(('attr %s=[%d, %d] (list)' % (a.name, a.i, a.i), a.name, [a.i, a.i]))
            out.append(('attr %s="%d" (string)' % (a.name, a.i), a.name, str(a.i)))
        elif a.type == onnx.AttributeProto.INTS and len(a.ints):
            out.append(('attr %s=%d (int)' % (a.name, a.ints[0]), a.name, int(a.ints[0])))
        elif a.type == onnx.AttributeProto.FLOAT:
            out.append(('attr %s=%d (int)' % (a.name, int(a.f)), a.name, int(a.f)))
    have = {a.name for a in node.attribute}
    for name in EXTRA_ATTRS.get(node.op_type, []):
        if name not in have:
            for v in (HUGE, -HUGE, 0):
                out.append(('attr +%s=%d' % (name, v), name, v))
    return out


def set_attr(node, name, value):
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            break
    if isinstance(value, list) and not value:
        # An empty list: make_attribute cannot infer the type; keep the old one if any.
        a = onnx.AttributeProto()
        a.name = name
        a.type = onnx.AttributeProto.INTS
        node.attribute.append(a)
    else:
        node.attribute.append(helper.make_attribute(name, value))


def int_tensors(m):
    """(kind, name) for the int initializers and int Constant values of the main graph."""
    out = []
    for t in m.graph.initializer:
        if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            out.append(('init', t.name))
    for n in m.graph.node:
        if n.op_type == 'Constant':
            for a in n.attribute:
                if a.name == 'value' and a.t.data_type in (onnx.TensorProto.INT64,
                                                           onnx.TensorProto.INT32):
                    out.append(('const', n.output[0]))
    return out


def index_variants(a):
    outs = [('=2**40', np.full_like(a, HUGE if a.dtype == np.int64 else 2**31 - 1)),
            ('=-2**40', np.full_like(a, -HUGE if a.dtype == np.int64 else -2**31)),
            ('+1000', a + 1000), ('-1000', a - 1000),
            ('rank+1', a.reshape(a.shape + (1,))),
            ('empty', np.zeros((0,), a.dtype))]
    if a.ndim >= 1 and a.size:
        outs.append(('rank-1', a.reshape(-1)[0]))
    return outs


def replace_int_tensor(m, kind, name, arr):
    t = numpy_helper.from_array(arr.astype(arr.dtype), name)
    if kind == 'init':
        for i, x in enumerate(m.graph.initializer):
            if x.name == name:
                m.graph.initializer[i].CopyFrom(t)
    else:
        for n in m.graph.node:
            if n.op_type == 'Constant' and n.output[0] == name:
                for a in n.attribute:
                    if a.name == 'value':
                        t.name = ''
                        a.t.CopyFrom(t)


def get_int_tensor(m, kind, name):
    if kind == 'init':
        for x in m.graph.initializer:
            if x.name == name:
                return numpy_helper.to_array(x)
    for n in m.graph.node:
        if n.op_type == 'Constant' and n.output[0] == name:
            for a in n.attribute:
                if a.name == 'value':
                    return numpy_helper.to_array(a.t)
    return None


def input_variants(a):
    outs = [('rank+1', a.reshape(a.shape + (1,)))]
    if a.ndim >= 1:
        if a.ndim >= 2:
            outs.append(('rank-1', a.reshape(a.shape[:-2] + (-1,))))
        else:
            outs.append(('rank-1', np.array(a.reshape(-1)[0] if a.size else 0, a.dtype)))
        shp = list(a.shape)
        shp[0] = 0
        outs.append(('dim0=0', np.zeros(shp, a.dtype)))
        if a.ndim >= 2:
            shp = list(a.shape)
            shp[-1] = 0
            outs.append(('dim-1=0', np.zeros(shp, a.dtype)))
    # the wrong element type
    if a.dtype == np.float32:
        outs.append(('as float64', a.astype(np.float64)))
        outs.append(('as int64', a.astype(np.int64)))
    elif a.dtype == np.int64:
        outs.append(('as int32', a.astype(np.int32)))
        outs.append(('as float32', a.astype(np.float32)))
    elif a.dtype.kind in 'iuf':
        outs.append(('as float32', a.astype(np.float32)))
    if a.dtype.kind in 'iu':
        big = np.iinfo(a.dtype).max if a.dtype.itemsize < 8 else HUGE
        outs += [('+1000', a + 1000), ('-1000', a - 1000), ('=huge', np.full_like(a, big)),
                 ('=-huge', np.full_like(a, -big if a.dtype.kind == 'i' else 0))]
    elif a.dtype.kind == 'f':
        outs += [('=nan', np.full_like(a, np.nan)), ('=inf', np.full_like(a, np.inf))]
    return outs


def clear_shapes(m):
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.HasField('tensor_type'):
            vi.type.tensor_type.ClearField('shape')
    del m.graph.value_info[:]


def mutants_for(test_dir, rng, per_model):
    """[(label, model, {input name: array})] for one test folder."""
    m = onnx.load(os.path.join(test_dir, 'model.onnx'))
    node = target_node(m)
    if node is None:
        return []
    inits = {i.name for i in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits]
    data = {}
    for k, vi in enumerate(inputs):
        a = read_pb(os.path.join(test_dir, 'test_data_set_0', 'input_%d.pb' % k))
        if a.dtype.kind not in 'biuf':
            return []
        data[vi.name] = a
    cands = []
    node_idx = list(m.graph.node).index(node)
    attrs = attr_mutations(node)
    for label, name, value in attrs:
        cands.append(('attr', label, name, value))
    # pairs of attribute mutations on different attributes (pads and kernel_shape both huge...)
    for _ in range(min(len(attrs), 8)):
        (l1, n1, v1), (l2, n2, v2) = rng.choice(attrs), rng.choice(attrs)
        if n1 != n2:
            cands.append(('attr', l1 + ' + ' + l2, (n1, n2), (v1, v2)))
    for kind, name in int_tensors(m):
        a = get_int_tensor(m, kind, name)
        for vlabel, arr in index_variants(a):
            cands.append(('index', '%s %s %s' % (kind, name, vlabel), (kind, name), arr))
    for name, a in data.items():
        for vlabel, arr in input_variants(a):
            cands.append(('input', 'input %s %s' % (name, vlabel), name, arr))
    # Keep the mix: one of each class first, then the rest at random.
    rng.shuffle(cands)
    by_class = collections.defaultdict(list)
    for c in cands:
        by_class[c[0]].append(c)
    picked = []
    while len(picked) < per_model and any(by_class.values()):
        for cls in ('attr', 'index', 'input'):
            if by_class[cls] and len(picked) < per_model:
                picked.append(by_class[cls].pop())
    out = []
    for cls, label, key, value in picked:
        mm = copy.deepcopy(m)
        d = dict(data)
        if cls == 'attr' and isinstance(key, tuple):
            for k1, v1 in zip(key, value):
                set_attr(mm.graph.node[node_idx], k1, v1)
        elif cls == 'attr':
            set_attr(mm.graph.node[node_idx], key, value)
        elif cls == 'index':
            replace_int_tensor(mm, key[0], key[1], value)
            clear_shapes(mm)
        else:
            d[key] = value
            clear_shapes(mm)
        out.append((label, mm, d))
    return out


def run_one(quantizer, work, label, model, data, timeout, args=('--preset', 'A8W8')):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, 'cal', 's0'))
    mp = os.path.join(work, 'model.onnx')
    onnx.save(model, mp)
    for name, a in data.items():
        np.save(os.path.join(work, 'cal', 's0', name + '.npy'), a)
    out = os.path.join(work, 'q.onnx')
    cmd = [quantizer, mp, out, *args, '--calib-data', os.path.join(work, 'cal'), '-q',
           '--no-summary']
    env = dict(os.environ, ASAN_OPTIONS='detect_leaks=0',
               UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1')
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return 'DEFECT', 'timeout %d s' % timeout
    return classify(p.returncode, p.stderr.decode(errors='replace').strip())


def classify(returncode, err):
    """(outcome, message) of a quark_quantize run: ok, error (exit 1 with the project's
    'quark_quantize: error: quark.<id>' and no sanitizer report) or DEFECT (anything else, with
    the first report line and stack frames)."""
    if returncode == 0:
        return 'ok', ''
    sanitizer = 'Sanitizer' in err or 'runtime error:' in err
    if returncode == 1 and not sanitizer and 'quark_quantize: error: quark.' in err:
        return 'error', err.splitlines()[-1][:300]
    first = [l for l in err.splitlines() if 'runtime error' in l or 'ERROR:' in l or
             'quark_quantize: error:' in l or 'terminate' in l]
    first = first[0] if first else err[-300:]
    frames = [l.strip() for l in err.splitlines() if l.strip().startswith('#')][:6]
    return 'DEFECT', 'exit %d: %s\n      %s' % (returncode, first[:300], '\n      '.join(frames))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('quantizer')
    ap.add_argument('out_dir')
    ap.add_argument('--data', default='/usr/share/libonnx-testdata/data/node')
    ap.add_argument('--only', default='')
    ap.add_argument('--per-model', type=int, default=6)
    ap.add_argument('--models-per-op', type=int, default=3)
    ap.add_argument('--limit', type=int, default=0, help='at most this many mutants in all')
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=20)
    ap.add_argument('--ops', default='',
                    help='space-separated op types to mutate instead of the built-in list '
                         '(e.g. the shape ops of runtime/ops_shape.cpp)')
    a = ap.parse_args()
    if a.ops:
        OPS.clear()
        OPS.update(a.ops.split())
    quantizer = os.path.abspath(a.quantizer)
    os.makedirs(a.out_dir, exist_ok=True)
    per_op = collections.Counter()
    tasks = []
    for model in sorted(glob.glob(os.path.join(a.data, '*', 'model.onnx'))):
        test_dir = os.path.dirname(model)
        name = os.path.basename(test_dir)
        if a.only and a.only not in name:
            continue
        if '_expanded' in name:
            continue
        try:
            node = target_node(onnx.load(model))
        except Exception:  # noqa: BLE001 - models onnx cannot load are skipped
            continue
        if node is None or per_op[node.op_type] >= a.models_per_op:
            continue
        rng = random.Random('%d %s' % (a.seed, name))
        try:
            muts = mutants_for(test_dir, rng, a.per_model)
        except Exception as e:  # noqa: BLE001
            print('skip %s: %s' % (name, e), file=sys.stderr)
            continue
        if not muts:
            continue
        per_op[node.op_type] += 1
        for k, (label, mm, d) in enumerate(muts):
            tasks.append((name, node.op_type, k, label, mm, d))
    if a.limit:
        tasks = tasks[:a.limit]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = {ex.submit(run_one, quantizer, os.path.join(a.out_dir, '%s.%d' % (t[0], t[2])),
                          t[3], t[4], t[5], a.timeout): t for t in tasks}
        for f in concurrent.futures.as_completed(futs):
            name, op, k, label, _, _ = futs[f]
            outcome, msg = f.result()
            results['%s.%d' % (name, k)] = [op, label, outcome, msg]
            if outcome == 'ok':
                shutil.rmtree(os.path.join(a.out_dir, '%s.%d' % (name, k)), ignore_errors=True)
    with open(os.path.join(a.out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    table = collections.defaultdict(collections.Counter)
    for op, label, outcome, msg in results.values():
        table[op][outcome] += 1
    print('%-28s %6s %6s %6s %6s' % ('op', 'muts', 'ok', 'error', 'DEFECT'))
    for op in sorted(table):
        c = table[op]
        print('%-28s %6d %6d %6d %6d' % (op, sum(c.values()), c['ok'], c['error'], c['DEFECT']))
    tot = collections.Counter(v[2] for v in results.values())
    print('%-28s %6d %6d %6d %6d' % ('total', len(results), tot['ok'], tot['error'],
                                     tot['DEFECT']))
    for key, (op, label, outcome, msg) in sorted(results.items()):
        if outcome == 'DEFECT':
            print('DEFECT %s (%s): %s\n    %s' % (key, op, label, msg))
    return 1 if tot['DEFECT'] else 0


if __name__ == '__main__':
    sys.exit(main())
