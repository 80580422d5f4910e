#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Differential sweep against ONNX Runtime: mutated real models through both.

Takes PP-OCR models (the cls text-direction classifier and the v4 detector at 64x64), applies
one or two random edits per model to declared types, shapes and graph structure (graph input and
output element types and dimensions, value_info entries that contradict the graph, Constant
tensors given another data type or dimension order, Cast targets, outputs that name an
intermediate value or repeat one, initializers that are also graph inputs, IR versions; with
--node-edits instead: an integer attribute set to another value or removed, an op type swapped for
a sibling, an input rewired to an earlier value, the last input dropped or an extra one added),
then:

  1. runs the mutant in ONNX Runtime 1.30 on one random sample (tests/ort/ort_run.js);
  2. quantizes it with quark_quantize (a random preset, --random data of the declared shape);
  3. when quark_quantize succeeds, runs its output in ORT on the same sample.

Outcomes per mutant:
  both-refuse   ORT and quark-cpp both refuse it (fine when quark-cpp's error is a quark.* one)
  both-run      both accept it, and ORT runs quark-cpp's output
  STRICTER      quark-cpp refuses a model ORT runs (examine: a false refusal is a defect)
  LAXER         quark-cpp quantizes a model ORT refuses (examine: the output may be wrong)
  DEFECT        quark-cpp's output does not run in ORT, or quark_quantize crashed, hung, exited
                with another status or printed an error without a quark.* code

    bench/onnx/ort_differential_sweep.py QUARK_QUANTIZE OUT_DIR [--count 300] [--seed 1]
        [--jobs 2] [--timeout 60] [--models cls,det] [--node-edits] [--opset N]

--opset N (18 to 26) first carries each model to opset 17 with ONNX's version converter, then
imports opset N: the operators these models use (det: Conv, ConvTranspose, Resize, Clip, ...)
keep their semantics from 17 to 26 with default attributes. cls's Softmax does not convert
(the converter's Softmax 12 -> 13 adapter needs shapes), so use --models det.

Needs python3-onnx, python3-numpy, node and onnxruntime-node in $QUARK_ORT_DIR (default
.cache/ort) and the models in .cache/models (scripts/fetch-models.sh). The mutants are
deterministic for one --seed. Results: OUT_DIR/results.json and one line per mutant on stdout.
"""
import argparse
import collections
import concurrent.futures
import copy
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = {
    'cls': ('.cache/models/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx', [1, 3, 48, 192]),
    'det': ('.cache/models/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx', [1, 3, 64, 64]),
}
PRESETS = ['XINT8', 'A8W8', 'U8S8', 'A16W8', 'VINT8', 'S8S8', 'BF16']
ELEM_TYPES = [0, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.INT64,
              TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BOOL, TensorProto.STRING,
              TensorProto.BFLOAT16, 99]
NPY_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8,
             TensorProto.INT32: np.int32, TensorProto.INT64: np.int64,
             TensorProto.FLOAT16: np.float16, TensorProto.BOOL: np.bool_}


def intermediates(m):
    return [o for n in m.graph.node for o in n.output if o]


def constants(m):
    return [n for n in m.graph.node if n.op_type == 'Constant' and n.attribute and
            n.attribute[0].name == 'value']


def mutate(m, rng):
    """Applies one edit to m in place; returns its description."""
    g = m.graph
    kinds = ['in_type', 'in_dim', 'in_rank', 'in_noshape', 'out_type', 'out_dim', 'vi_type',
             'vi_rank', 'const_type', 'const_dims', 'cast_to', 'out_intermediate', 'out_repeat',
             'out_extra', 'init_input', 'ir', 'out_none']
    if NODE_EDITS:
        kinds = ['attr_value', 'attr_remove', 'op_swap', 'rewire', 'drop_input', 'extra_input']
    kind = rng.choice(kinds)
    if kind in ('attr_value', 'attr_remove', 'op_swap', 'rewire', 'drop_input', 'extra_input'):
        return node_edit(m, rng, kind)
    if kind.startswith('out_') and not g.output:
        return 'nothing (no graph output left to edit)'
    if kind == 'in_type':
        t = rng.choice(ELEM_TYPES)
        g.input[0].type.tensor_type.elem_type = t
        return f'graph input elem_type {t}'
    if kind in ('in_dim', 'in_rank') and len(g.input[0].type.tensor_type.shape.dim) < 2:
        return 'nothing (the graph input has too few dimensions left to edit)'
    if kind == 'in_dim':
        dims = g.input[0].type.tensor_type.shape.dim
        d = dims[rng.randrange(len(dims))]
        v = rng.choice([0, 1, 2, 4, 7, 1000])
        d.Clear()
        d.dim_value = v
        return f'graph input dim -> {v}'
    if kind == 'in_rank':
        s = g.input[0].type.tensor_type.shape
        if rng.random() < 0.5:
            s.dim.pop()
            return 'graph input rank 3'
        s.dim.add().dim_value = 1
        return 'graph input rank 5'
    if kind == 'in_noshape':
        g.input[0].type.tensor_type.ClearField('shape')
        return 'graph input without shape'
    if kind == 'out_type':
        t = rng.choice(ELEM_TYPES)
        g.output[0].type.tensor_type.elem_type = t
        return f'graph output elem_type {t}'
    if kind == 'out_dim':
        s = g.output[0].type.tensor_type.shape
        s.ClearField('dim')
        for v in rng.choice([[1, 2, 3], [5], [1, 7, 7, 7]]):
            s.dim.add().dim_value = v
        return 'graph output declared ' + 'x'.join(str(d.dim_value) for d in s.dim)
    if kind in ('vi_type', 'vi_rank'):
        name = rng.choice(intermediates(m))
        vi = helper.make_tensor_value_info(
            name, rng.choice(ELEM_TYPES[1:-1]) if kind == 'vi_type' else TensorProto.FLOAT,
            None if kind == 'vi_type' else [1] * rng.choice([1, 2, 6]))
        g.value_info.append(vi)
        return f'value_info {kind[3:]} for {name}'
    if kind in ('const_type', 'const_dims'):
        n = rng.choice(constants(m))
        t = n.attribute[0].t
        a = numpy_helper.to_array(t)
        if kind == 'const_type':
            dt = rng.choice([np.float64, np.float16, np.int64, np.int32, np.int8])
            new = numpy_helper.from_array(a.astype(dt), t.name)
            what = f'Constant {n.output[0]} as {np.dtype(dt).name}'
        else:
            if a.ndim < 2:
                return mutate(m, rng)
            new = numpy_helper.from_array(np.ascontiguousarray(np.swapaxes(a, 0, 1)), t.name)
            what = f'Constant {n.output[0]} axes 0/1 swapped {a.shape}'
        t.CopyFrom(new)
        return what
    if kind == 'cast_to':
        casts = [n for n in g.node if n.op_type == 'Cast']
        if not casts:
            return mutate(m, rng)
        n = rng.choice(casts)
        to = rng.choice(ELEM_TYPES)
        for a in n.attribute:
            if a.name == 'to':
                a.i = to
        return f'Cast {n.name} to {to}'
    if kind == 'out_intermediate':
        name = rng.choice(intermediates(m))
        g.output[0].name = name
        g.output[0].type.tensor_type.ClearField('shape')
        return f'graph output renamed to intermediate {name}'
    if kind == 'out_repeat':
        g.output.append(copy.deepcopy(g.output[0]))
        return 'graph output repeated'
    if kind == 'out_extra':
        name = rng.choice(intermediates(m))
        g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        return f'extra graph output {name} (float)'
    if kind == 'init_input':
        n = rng.choice(constants(m))
        t = copy.deepcopy(n.attribute[0].t)
        t.name = n.output[0]
        g.node.remove(n)
        g.initializer.append(t)
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        return f'Constant {t.name} as an initializer that is also a graph input'
    if kind == 'ir':
        v = rng.choice([3, 4, 6, 7, 9, 10, 11, 12])
        m.ir_version = v
        return f'ir_version {v}'
    g.ClearField('output')
    return 'no graph output'


NODE_EDITS = False  # --node-edits: edit nodes instead of declarations
SWAPS = [['Relu', 'Sigmoid', 'Tanh', 'HardSigmoid', 'Softmax', 'Neg', 'Abs', 'Identity'],
         ['Add', 'Mul', 'Sub', 'Div', 'Pow', 'MatMul', 'Max'],
         ['Conv', 'ConvTranspose'], ['MaxPool', 'AveragePool', 'LpPool'],
         ['GlobalAveragePool', 'GlobalMaxPool', 'Flatten'], ['Concat', 'Sum', 'Mean']]


def node_edit(m, rng, kind):
    """Edits one node of the main graph (not a Constant) in place; returns the description."""
    nodes = [n for n in m.graph.node if n.op_type != 'Constant']
    n = rng.choice(nodes)
    label = f'{n.name} ({n.op_type})'
    if kind == 'attr_value':
        ints = [a for a in n.attribute if a.type in (onnx.AttributeProto.INT,
                                                       onnx.AttributeProto.INTS)]
        if not ints:
            return node_edit(m, rng, 'op_swap')
        a = rng.choice(ints)
        v = rng.choice([-2, -1, 0, 2, 3, 7, 100])
        if a.type == onnx.AttributeProto.INT:
            a.i = v
        elif a.ints:
            a.ints[rng.randrange(len(a.ints))] = v
        return f'{label} attribute {a.name} gets {v}'
    if kind == 'attr_remove':
        if not n.attribute:
            return node_edit(m, rng, 'drop_input')
        a = n.attribute[rng.randrange(len(n.attribute))]
        n.attribute.remove(a)
        return f'{label} loses attribute {a.name}'
    if kind == 'op_swap':
        group = next((g for g in SWAPS if n.op_type in g), None)
        if group is None:
            return node_edit(m, rng, 'rewire')
        old = n.op_type
        n.op_type = rng.choice([o for o in group if o != old])
        return f'{n.name} op {old} -> {n.op_type}'
    if kind == 'rewire':
        ins = [i for i, v in enumerate(n.input) if v]
        if not ins:
            return node_edit(m, rng, 'extra_input')
        k = rng.choice(ins)
        # a value made before the node (file order is topological in these models), or x
        before = ['x'] + [o for p in m.graph.node[:list(m.graph.node).index(n)] for o in p.output]
        n.input[k] = rng.choice(before)
        return f'{label} input #{k} reads {n.input[k]}'
    if kind == 'drop_input':
        if not n.input:
            return node_edit(m, rng, 'extra_input')
        n.input.pop()
        return f'{label} loses its last input'
    n.input.append('x')
    return f'{label} gets an extra input x'


def sample_for(m, shape, rng_seed, path):
    """One .npy per graph input the ORT runner binds (ORT leaves out those an initializer backs)."""
    inits = {t.name for t in m.graph.initializer}
    files = []
    r = np.random.default_rng(rng_seed)
    for i, v in enumerate(m.graph.input):
        p = os.path.join(path, f'in{i}.npy')
        if v.name in inits:
            continue
        else:
            et = v.type.tensor_type.elem_type
            if et not in NPY_TYPES:
                return None  # the Node binding cannot feed this type
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim] if \
                v.type.tensor_type.HasField('shape') else shape
            dims = [d if d > 0 else shape[k] if k < len(shape) else 1 for k, d in enumerate(dims)]
            np.save(p, (r.random(dims, dtype=np.float64) * 2 - 1).astype(NPY_TYPES[et]))
        files.append(p)
    return files


def run(cmd, timeout, env=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, (p.stdout + p.stderr)
    except subprocess.TimeoutExpired:
        return 'timeout', ''


def ort(model, files, out, timeout):
    env = dict(os.environ, QUARK_ORT_DIR=os.environ.get('QUARK_ORT_DIR',
                                                         os.path.join(ROOT, '.cache', 'ort')))
    rc, text = run(['node', os.path.join(ROOT, 'tests', 'ort', 'ort_run.js'), model, out] + files,
                   timeout, env)
    lines = [ln for ln in text.splitlines() if 'rror' in ln and not ln.lstrip().startswith('at ')]
    return rc == 0, (lines[0] if lines else text.strip()[-300:])[:300]


def one(args, i, base, shape, mname):
    rng = random.Random(args.seed * 1000003 + i)
    m = copy.deepcopy(base)
    what = [mutate(m, rng) for _ in range(rng.choice([1, 1, 2]))]
    d = os.path.join(args.out, f'{mname}_{i}')
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, 'mutant.onnx')
    onnx.save(m, path)
    files = sample_for(m, shape, i, d)
    ort_in = ort(path, files, os.path.join(d, 'o1'), args.timeout) if files is not None else None
    preset = rng.choice(PRESETS)
    q = os.path.join(d, 'q.onnx')
    # The sample's shape: the declared dimensions where fixed, the model's usual ones elsewhere.
    declared = m.graph.input[0].type.tensor_type
    dims = [d.dim_value for d in declared.shape.dim] if declared.HasField('shape') else shape
    dims = [d if d > 0 else shape[k] if k < len(shape) else 1 for k, d in enumerate(dims)]
    shape_arg = f'{m.graph.input[0].name}:' + 'x'.join(map(str, dims))
    rc, text = run([args.tool, path, q, '--preset', preset, '--random', '--shape', shape_arg,
                    '--samples', '2', '-q', '--no-summary'], args.timeout)
    ours_ok = rc == 0
    rec = {'model': mname, 'i': i, 'edits': what, 'preset': preset, 'rc': rc,
           'ours': text.strip().splitlines()[-1][:300] if text.strip() else '',
           'ort_in': None if ort_in is None else ort_in[0],
           'ort_in_msg': '' if ort_in is None else ort_in[1]}
    if rc not in (0, 1) or 'runtime error:' in text or 'AddressSanitizer' in text or \
            (rc == 1 and 'error: quark.' not in text):
        rec['outcome'] = 'DEFECT'
    elif ours_ok and not os.path.exists(q):
        rec['outcome'] = 'DEFECT'
    elif not ours_ok and os.path.exists(q):
        rec['outcome'] = 'DEFECT'
        rec['ours'] += ' (output left behind)'
    elif ours_ok:
        qfiles = sample_for(onnx.load(q), shape, i, d)
        ort_out = ort(q, qfiles, os.path.join(d, 'o2'), args.timeout) if qfiles else (False, 'cannot feed')
        rec['ort_out'] = ort_out[1]
        if not ort_out[0]:
            rec['outcome'] = 'DEFECT'
        elif ort_in is not None and not ort_in[0]:
            rec['outcome'] = 'LAXER'
        else:
            rec['outcome'] = 'both-run'
    else:
        rec['outcome'] = 'STRICTER' if ort_in is not None and ort_in[0] else 'both-refuse'
    if rec['outcome'] in ('both-run', 'both-refuse'):
        shutil.rmtree(d, ignore_errors=True)
    return rec


def at_opset(m, opset):
    """m imported at `opset` (0: unchanged); see --opset."""
    if opset == 0:
        return m
    if not 18 <= opset <= 26:
        sys.exit(f'--opset {opset}: 18 to 26')
    from onnx import version_converter
    m = version_converter.convert_version(m, 17)
    for o in m.opset_import:
        if o.domain in ('', 'ai.onnx'):
            o.version = opset
    m.ir_version = max(m.ir_version, 10)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('tool')
    ap.add_argument('out')
    ap.add_argument('--count', type=int, default=300)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--timeout', type=int, default=60)
    ap.add_argument('--models', default='cls,det')
    ap.add_argument('--node-edits', action='store_true',
                    help='edit attributes, op types and inputs of nodes instead of declarations')
    ap.add_argument('--opset', type=int, default=0,
                    help='import this ai.onnx opset (18 to 26) after converting to 17')
    args = ap.parse_args()
    global NODE_EDITS
    NODE_EDITS = args.node_edits
    os.makedirs(args.out, exist_ok=True)
    bases = {k: (at_opset(onnx.load(os.path.join(ROOT, MODELS[k][0])), args.opset), MODELS[k][1])
             for k in args.models.split(',')}
    names = list(bases)
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = [ex.submit(one, args, i, bases[names[i % len(names)]][0],
                          bases[names[i % len(names)]][1], names[i % len(names)])
                for i in range(args.count)]
        for f in concurrent.futures.as_completed(futs):
            try:
                r = f.result()
            except Exception as e:  # a mutation this script cannot make: report, go on
                print(f'harness error: {e!r}', flush=True)
                continue
            results.append(r)
            print(f"{r['outcome']:11} {r['model']}_{r['i']} {r['preset']:6} {'; '.join(r['edits'])}"
                  f" | ours: {r['ours'][:160]} | ort: {r['ort_in_msg'][:160]}", flush=True)
    results.sort(key=lambda r: (r['model'], r['i']))
    with open(os.path.join(args.out, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    print(dict(collections.Counter(r['outcome'] for r in results)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
