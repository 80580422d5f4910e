#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Mutation sweep of the quantizer's graph passes: malformed multi-node patterns.

mutation_sweep.py mutates single-node models, which exercise the runtime's operators. The
quantizer's graph passes (onnx_frontend/src/quantizer/graph_passes.cpp, conversions.cpp,
algo_cle.cpp, the NPU alignments) read shapes and attributes of node *patterns* before the
runtime has checked anything: BatchNormalization or Mul / Add after a Conv, ConvTranspose, Gemm
or a Concat of them, Clip / Split / ReduceMean / GlobalAveragePool / BatchNormalization
conversions, Cross-Layer Equalization pairs, constant folding. This script builds small seed
models of those patterns (random weights, fixed seed), writes mutated copies and runs

    quark_quantize mutant.onnx q.onnx <CONFIG> --calib-data <dir> -q --no-summary

with each configuration below (A8W8: the folds; VINT8: the conversions; XINT8: the power-of-two
alignments; a JSON config that turns on every conversion plus CLE). `--configs algos` runs the
algorithms instead (AdaRound, AdaQuant, CLE + bias correction, SmoothQuant, GPTQ, auto mixed
precision, each on Int8Spec with few iterations) and the presets outside the int8 flow
(UINT8_DYNAMIC_QUANT, MATMUL_NBITS, BFP16, MXFP4E2M1, MX6, BF16_MIXED_BFP16, FP16). Mutations:
  attr     every attribute of every node set out of range or to the wrong type (the same
           list as mutation_sweep.attr_mutations), and group / axis / transB / epsilon added
           where a node lacks them
  shape    a float initializer given another shape (a dimension 0, 1 or one more, one
           dimension fewer or more, a scalar), with fresh random values of that shape
  value    a float initializer with a NaN, an Inf, all zeros, or (BatchNormalization
           variance) negative values
The model's declared value_info and output shapes are cleared so the bad shapes reach the
passes and the runtime. Outcomes as in mutation_sweep.py, plus: an `error` that leaves the
output file behind, or an `ok` without one, is a DEFECT.

Build the tool with ASan + UBSan (docs/bench/robustness.md), then

    bench/onnx/pass_mutation_sweep.py QUARK_QUANTIZE OUT_DIR [--jobs 2] [--seed 1]
        [--per-seed 0] [--only SUBSTRING] [--timeout 30] [--configs passes|algos|all]

--per-seed N keeps N mutants per seed model and configuration (0: all). Results:
OUT_DIR/results.json.
"""
import argparse
import collections
import concurrent.futures
import copy
import json
import os
import random
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutation_sweep as ms  # noqa: E402  (attr_mutations, set_attr, clear_shapes, run_one)

HERE = os.path.dirname(os.path.abspath(__file__))


def rnd(rng, shape, lo=-0.5, hi=0.5):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


class Seed:
    """A seed model: nodes, float initializers, one input x of a fixed shape."""

    def __init__(self, name, xshape, out_names, opset=13):
        self.name, self.xshape, self.out_names, self.opset = name, xshape, out_names, opset
        self.inits = {}
        self.nodes = []

    def init(self, name, arr):
        self.inits[name] = np.asarray(arr, dtype=np.float32)

    def node(self, op, ins, outs, **attrs):
        self.nodes.append(helper.make_node(op, ins, outs, name='%s_%d' % (op, len(self.nodes)),
                                           **attrs))

    def bn(self, prefix, c, rng):
        self.init(prefix + '_s', rnd(rng, [c], 0.5, 1.5))
        self.init(prefix + '_b', rnd(rng, [c]))
        self.init(prefix + '_m', rnd(rng, [c]))
        self.init(prefix + '_v', rnd(rng, [c], 0.5, 1.5))
        return [prefix + '_s', prefix + '_b', prefix + '_m', prefix + '_v']

    def build(self, inits=None, nodes=None):
        inits = self.inits if inits is None else inits
        g = helper.make_graph(
            nodes if nodes is not None else self.nodes, self.name,
            [helper.make_tensor_value_info('x', TensorProto.FLOAT, self.xshape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.out_names],
            [numpy_helper.from_array(v, k) for k, v in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid('', self.opset)])


def seeds():
    rng = np.random.default_rng(7)
    out = []
    # Conv(bias) -> BN -> Relu -> Conv -> Mul(scalar) -> Add(per channel): FoldBatchNorm and
    # the Conv + Mul / Add fold.
    s = Seed('conv_bn_affine', [1, 4, 6, 6], ['y'])
    s.init('w1', rnd(rng, [6, 4, 3, 3]))
    s.init('b1', rnd(rng, [6]))
    s.node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1])
    s.node('BatchNormalization', ['c1'] + s.bn('bn1', 6, rng), ['n1'], epsilon=1e-3)
    s.node('Relu', ['n1'], ['r1'])
    s.init('w2', rnd(rng, [8, 6, 1, 1]))
    s.node('Conv', ['r1', 'w2'], ['c2'])
    s.init('k', np.array([1.75], np.float32))
    s.node('Mul', ['k', 'c2'], ['m2'])
    s.init('sh', rnd(rng, [1, 8, 1, 1]))
    s.node('Add', ['m2', 'sh'], ['y'])
    out.append(s)
    # ConvTranspose(group 2) -> Add -> BN.
    s = Seed('convtranspose_bn', [1, 4, 5, 5], ['y'])
    s.init('wt', rnd(rng, [4, 2, 2, 2]))
    s.node('ConvTranspose', ['x', 'wt'], ['t'], group=2, strides=[2, 2])
    s.init('tb', rnd(rng, [1, 4, 1, 1]))
    s.node('Add', ['t', 'tb'], ['a'])
    s.node('BatchNormalization', ['a'] + s.bn('bn', 4, rng), ['y'])
    out.append(s)
    # Gemm(transB, alpha, beta, bias) -> BN.
    s = Seed('gemm_bn', [3, 5], ['y'])
    s.init('w', rnd(rng, [4, 5]))
    s.init('c', rnd(rng, [4]))
    s.node('Gemm', ['x', 'w', 'c'], ['g'], transB=1, alpha=0.5, beta=2.0)
    s.node('BatchNormalization', ['g'] + s.bn('bn', 4, rng), ['y'])
    out.append(s)
    # Concat of two Convs -> BN (folded through the Concat).
    s = Seed('concat_bn', [1, 4, 6, 6], ['y'])
    s.init('wa', rnd(rng, [3, 4, 1, 1]))
    s.init('ba', rnd(rng, [3]))
    s.init('wb', rnd(rng, [5, 4, 1, 1]))
    s.node('Conv', ['x', 'wa', 'ba'], ['ca'])
    s.node('Conv', ['x', 'wb'], ['cb'])
    s.node('Concat', ['ca', 'cb'], ['cc'], axis=1)
    s.node('BatchNormalization', ['cc'] + s.bn('bn', 8, rng), ['y'])
    out.append(s)
    # The conversions: BN alone (ConvertBNToConv), Clip(0, inf) (ConvertClipToRelu), Split
    # (ConvertSplitToSlice), ReduceMean over H, W (ConvertReduceMeanToGlobalAvgPool), a large
    # GlobalAveragePool (SplitLargeKernelPool).
    s = Seed('conversions', [1, 4, 16, 16], ['y'])
    s.node('BatchNormalization', ['x'] + s.bn('bn', 4, rng), ['n'])
    s.init('lo', np.array(0.0, np.float32))
    s.node('Clip', ['n', 'lo'], ['r'])
    s.init('split', np.array([2, 2], np.float32))  # replaced by an int64 tensor below
    s.node('Split', ['r', 'split'], ['s0', 's1'], axis=1)
    s.node('ReduceMean', ['s0'], ['m0'], axes=[2, 3], keepdims=1)
    s.node('GlobalAveragePool', ['s1'], ['m1'])
    s.node('Concat', ['m0', 'm1'], ['y'], axis=1)
    out.append(s)
    # Cross-Layer Equalization: Conv -> Relu -> depthwise Conv -> Relu -> Conv.
    s = Seed('cle_convs', [1, 4, 6, 6], ['y'])
    s.init('w1', rnd(rng, [8, 4, 3, 3]))
    s.init('b1', rnd(rng, [8]))
    s.node('Conv', ['x', 'w1', 'b1'], ['c1'], pads=[1, 1, 1, 1])
    s.node('Relu', ['c1'], ['r1'])
    s.init('wd', rnd(rng, [8, 1, 3, 3]))
    s.init('bd', rnd(rng, [8]))
    s.node('Conv', ['r1', 'wd', 'bd'], ['c2'], pads=[1, 1, 1, 1], group=8)
    s.node('Relu', ['c2'], ['r2'])
    s.init('w3', rnd(rng, [6, 8, 1, 1]))
    s.init('b3', rnd(rng, [6]))
    s.node('Conv', ['r2', 'w3', 'b3'], ['y'])
    out.append(s)
    # CLE on Gemms, and constant folding (Add of two constants feeding a Mul).
    s = Seed('cle_gemms_constants', [2, 6], ['y'])
    s.init('g1', rnd(rng, [6, 8]))
    s.init('gb1', rnd(rng, [8]))
    s.node('Gemm', ['x', 'g1', 'gb1'], ['h'])
    s.node('Relu', ['h'], ['hr'])
    s.init('g2', rnd(rng, [8, 4]))
    s.node('Gemm', ['hr', 'g2'], ['o'])
    s.init('ca', rnd(rng, [4]))
    s.init('cb', rnd(rng, [4]))
    s.node('Add', ['ca', 'cb'], ['cs'])
    s.node('Mul', ['o', 'cs'], ['y'])
    out.append(s)
    # MatMuls with constant weights (SmoothQuant, GPTQ, MatMulNBits, dynamic quantization,
    # fast finetune on MatMul): x -> MatMul -> Add(bias) -> Relu -> MatMul -> y.
    s = Seed('matmul_chain', [2, 3, 8], ['y'])
    s.init('m1', rnd(rng, [8, 16]))
    s.init('mb1', rnd(rng, [16]))
    s.node('MatMul', ['x', 'm1'], ['h'])
    s.node('Add', ['h', 'mb1'], ['hb'])
    s.node('Relu', ['hb'], ['hr'])
    s.init('m2', rnd(rng, [16, 8]))
    s.node('MatMul', ['hr', 'm2'], ['y'])
    out.append(s)
    # LayerNormalization -> MatMul -> Softmax (a transformer's norm and projection; opset 17).
    s = Seed('layernorm_matmul', [1, 4, 8], ['y'], opset=17)
    s.init('ln_s', rnd(rng, [8], 0.5, 1.5))
    s.init('ln_b', rnd(rng, [8]))
    s.node('LayerNormalization', ['x', 'ln_s', 'ln_b'], ['n'], axis=-1, epsilon=1e-5)
    s.init('mq', rnd(rng, [8, 8]))
    s.node('MatMul', ['n', 'mq'], ['q'])
    s.node('Softmax', ['q'], ['y'], axis=-1)
    out.append(s)
    # SimulateDPU's conversions (XINT8 flow): LeakyRelu, AveragePool, Sigmoid, HardSigmoid(1/6),
    # ReduceMean, Clip.
    s = Seed('dpu_simulation', [1, 4, 6, 6], ['y'])
    s.init('wd', rnd(rng, [4, 4, 3, 3]))
    s.node('Conv', ['x', 'wd'], ['c'], pads=[1, 1, 1, 1])
    s.node('LeakyRelu', ['c'], ['l'], alpha=0.1)
    s.node('AveragePool', ['l'], ['p'], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    s.node('Sigmoid', ['p'], ['sg'])
    s.node('HardSigmoid', ['p'], ['hs'], alpha=1.0 / 6.0, beta=0.5)
    s.node('Add', ['sg', 'hs'], ['a'])
    s.node('ReduceMean', ['a'], ['m'], axes=[1], keepdims=1)
    s.init('clo', np.array(-0.4, np.float32))
    s.init('chi', np.array(200.7, np.float32))
    s.node('Clip', ['m', 'clo', 'chi'], ['y'])
    out.append(s)
    # SimplifyModel's rewrites (on by default): Identity, Pad -> Conv, cancelling Transposes,
    # Shape -> Reshape, a Reshape chain, a one-input Concat, two equal Relus, Dropout, a dead
    # node. int64 tensors are named i64_*.
    s = Seed('simplify_patterns', [1, 4, 6, 6], ['y'])
    s.node('Identity', ['x'], ['i'])
    s.init('i64_pads', np.array([0, 0, 1, 1, 0, 0, 1, 1], np.float32))
    s.node('Pad', ['i', 'i64_pads'], ['p'])
    s.init('ws', rnd(rng, [4, 4, 3, 3]))
    s.node('Conv', ['p', 'ws'], ['c'])
    s.node('Transpose', ['c'], ['t1'], perm=[0, 2, 3, 1])
    s.node('Transpose', ['t1'], ['t2'], perm=[0, 3, 1, 2])
    s.node('Shape', ['t2'], ['sh'])
    s.node('Reshape', ['t2', 'sh'], ['r1'])
    s.init('i64_to3', np.array([1, 4, 36], np.float32))
    s.node('Reshape', ['r1', 'i64_to3'], ['r2'])
    s.init('i64_to2', np.array([1, 144], np.float32))
    s.node('Reshape', ['r2', 'i64_to2'], ['r3'])
    s.node('Concat', ['r3'], ['cc'], axis=1)
    s.node('Relu', ['cc'], ['a'])
    s.node('Dropout', ['a'], ['da'])
    s.node('Relu', ['cc'], ['b'])
    s.node('Sigmoid', ['x'], ['unused'])
    s.node('Add', ['da', 'b'], ['y'])
    out.append(s)
    return out


def to_model(seed, inits, nodes=None):
    m = seed.build(inits, nodes)
    # Split's sizes and Clip's bound are int64 / float tensors in opset 13.
    for i, t in enumerate(m.graph.initializer):
        if t.name == 'split' or t.name.startswith('i64_'):
            arr = numpy_helper.to_array(t).astype(np.int64)
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, t.name))
    return m


def shape_variants(shape):
    out = []
    for k in range(len(shape)):
        for d in (0, 1, shape[k] + 1):
            if d != shape[k]:
                s = list(shape)
                s[k] = d
                out.append(('dim %d=%d' % (k, d), s))
    if len(shape) >= 1:
        out.append(('rank-1', list(shape[1:])))
    out.append(('rank+1', [1] + list(shape)))
    if shape:
        out.append(('scalar', []))
    return out


def mutants(seed, rng):
    base = dict(seed.inits)
    res = []
    for n_i, node in enumerate(seed.nodes):
        for label, name, value in ms.attr_mutations(node):
            nodes = copy.deepcopy(seed.nodes)
            ms.set_attr(nodes[n_i], name, value)
            res.append(('%s: %s' % (node.name, label), to_model(seed, base, nodes)))
        have = {a.name for a in node.attribute}
        for name in ('group', 'axis', 'transB', 'epsilon'):
            if name not in have:
                for v in (0, -1, ms.HUGE):
                    nodes = copy.deepcopy(seed.nodes)
                    ms.set_attr(nodes[n_i], name, v)
                    res.append(('%s: attr +%s=%d' % (node.name, name, v),
                                to_model(seed, base, nodes)))
    for name, arr in base.items():
        if name == 'split':
            continue
        for label, shape in shape_variants(list(arr.shape)):
            inits = dict(base)
            inits[name] = rnd(rng, shape)
            res.append(('%s: shape %s -> %s (%s)' % (name, list(arr.shape), shape, label),
                        to_model(seed, inits)))
        values = [('nan', np.nan), ('inf', np.inf), ('zeros', 0.0)]
        if name.endswith('_v'):
            values.append(('negative', -1.0))
        for label, v in values:
            a = arr.copy()
            if label in ('zeros', 'negative'):
                a[...] = v
            else:
                a.reshape(-1)[0] = v
            inits = dict(base)
            inits[name] = a
            res.append(('%s: value %s' % (name, label), to_model(seed, inits)))
    for _, m in res:
        ms.clear_shapes(m)
    return res


def write_config(out_dir, name, cfg):
    path = os.path.join(out_dir, name + '.json')
    with open(path, 'w') as f:
        json.dump(cfg, f)
    return ('--config', path)


def algo_configs(out_dir):
    """The algorithms (few iterations: the sweep looks for crashes, not accuracy) and the
    presets whose numerics differ from the int8 flow: block formats, float types, dynamic
    quantization, MatMulNBits, auto mixed precision."""
    int8 = {'input_tensors': 'Int8Spec', 'weight': 'Int8Spec'}
    out = {}
    algos = {
        'adaround': [{'name': 'adaround', 'num_iterations': 5}],
        'adaquant': [{'name': 'adaquant', 'num_iterations': 5, 'update_bias': True}],
        'cle_biascorr': [{'name': 'cle', 'cle_steps': -1}, {'name': 'bias_correction'}],
        'smooth_quant': [{'name': 'smooth_quant', 'alpha': 0.5}],
        'gptq': [{'name': 'gptq', 'bits': 4, 'group_size': 4}],
        'automp': [{'name': 'auto_mixprecision', 'act_target_quant_type': 'QInt16',
                    'l2_target': 0.0}],
    }
    for name, algo in algos.items():
        out[name] = write_config(out_dir, name, {'global_config': int8, 'algo_config': algo})
    for preset in ('UINT8_DYNAMIC_QUANT', 'MATMUL_NBITS', 'BFP16', 'MXFP4E2M1', 'MX6',
                   'BF16_MIXED_BFP16', 'FP16'):
        out[preset] = ('--preset', preset)
    return out


def configs(out_dir, which='passes'):
    if which == 'algos':
        return algo_configs(out_dir)
    cfg = {
        'global_config': {'input_tensors': 'Int8Spec', 'weight': 'Int8Spec'},
        'algo_config': [{'name': 'cle'}],
        'extra_options': {
            'ConvertBNToConv': True, 'ConvertClipToRelu': True, 'ConvertSplitToSlice': True,
            'ConvertReduceMeanToGlobalAvgPool': True, 'SplitLargeKernelPool': True,
            'ForceQuantizeNoInputCheck': True}}
    path = os.path.join(out_dir, 'conversions_cle.json')
    with open(path, 'w') as f:
        json.dump(cfg, f)
    # SimulateDPU with the Clip conversion too, and the bfloat16 post-processing keys.
    dpu = {'global_config': {'input_tensors': 'XInt8Spec', 'weight': 'XInt8Spec'},
           'extra_options': {'ConvertClipToDPUVersion': True}}
    dpu_path = os.path.join(out_dir, 'dpu_clip.json')
    with open(dpu_path, 'w') as f:
        json.dump(dpu, f)
    bf16 = {'global_config': {'input_tensors': 'BFloat16Spec', 'weight': 'BFloat16Spec'},
            'extra_options': {'EnableVaimlBF16': True}}
    bf16_path = os.path.join(out_dir, 'bf16_vaiml.json')
    with open(bf16_path, 'w') as f:
        json.dump(bf16, f)
    out = {'A8W8': ('--preset', 'A8W8'), 'VINT8': ('--preset', 'VINT8'),
           'XINT8': ('--preset', 'XINT8'), 'conversions_cle': ('--config', path),
           'dpu_clip': ('--config', dpu_path), 'bf16_vaiml': ('--config', bf16_path)}
    if which == 'all':
        out.update(algo_configs(out_dir))
    return out


def run(quantizer, work, label, model, data, timeout, args):
    outcome, msg = ms.run_one(quantizer, work, label, model, data, timeout, args)
    written = os.path.exists(os.path.join(work, 'q.onnx'))
    if outcome == 'error' and written:
        return 'DEFECT', 'error, but the output file was left behind: ' + msg
    if outcome == 'ok' and not written:
        return 'DEFECT', 'exit 0 without an output file'
    return outcome, msg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('quantizer')
    ap.add_argument('out_dir')
    ap.add_argument('--only', default='')
    ap.add_argument('--per-seed', type=int, default=0)
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=30)
    ap.add_argument('--configs', choices=('passes', 'algos', 'all'), default='passes',
                    help='the graph passes\' presets (A8W8, VINT8, XINT8, conversions + CLE), '
                    'the algorithms and the non-int8 presets, or both')
    a = ap.parse_args()
    quantizer = os.path.abspath(a.quantizer)
    os.makedirs(a.out_dir, exist_ok=True)
    cfgs = configs(os.path.abspath(a.out_dir), a.configs)
    tasks = []
    for seed in seeds():
        if a.only and a.only not in seed.name:
            continue
        rng = np.random.default_rng(a.seed)
        data = {'x': rnd(rng, seed.xshape, -2.0, 2.0)}
        muts = mutants(seed, rng)
        # The unmutated seed first: it must quantize (else the sweep tests nothing).
        base = to_model(seed, dict(seed.inits))
        ms.clear_shapes(base)
        muts = [('seed', base)] + muts
        for cname, args in cfgs.items():
            chosen = muts
            if a.per_seed and len(muts) > a.per_seed:
                pick = random.Random('%d %s %s' % (a.seed, seed.name, cname))
                chosen = [muts[0]] + pick.sample(muts[1:], a.per_seed - 1)
            for k, (label, m) in enumerate(chosen):
                tasks.append(('%s.%s.%d' % (seed.name, cname, k), seed.name, cname, label, m,
                              data, args))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = {ex.submit(run, quantizer, os.path.join(a.out_dir, t[0]), t[3], t[4], t[5],
                          a.timeout, t[6]): t for t in tasks}
        for f in concurrent.futures.as_completed(futs):
            key, sname, cname, label, _, _, _ = futs[f]
            outcome, msg = f.result()
            if label == 'seed' and outcome != 'ok':
                outcome, msg = 'DEFECT', 'the unmutated seed does not quantize: ' + msg
            results[key] = [sname, cname, label, outcome, msg]
            if outcome != 'DEFECT':
                shutil.rmtree(os.path.join(a.out_dir, key), ignore_errors=True)
    with open(os.path.join(a.out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    table = collections.defaultdict(collections.Counter)
    for sname, cname, label, outcome, msg in results.values():
        table['%s / %s' % (sname, cname)][outcome] += 1
    print('%-40s %6s %6s %6s %6s' % ('seed / configuration', 'muts', 'ok', 'error', 'DEFECT'))
    for key in sorted(table):
        c = table[key]
        print('%-40s %6d %6d %6d %6d' % (key, sum(c.values()), c['ok'], c['error'], c['DEFECT']))
    tot = collections.Counter(v[3] for v in results.values())
    print('%-40s %6d %6d %6d %6d' % ('total', len(results), tot['ok'], tot['error'],
                                     tot['DEFECT']))
    for key, (sname, cname, label, outcome, msg) in sorted(results.items()):
        if outcome == 'DEFECT':
            print('DEFECT %s (%s): %s\n    %s' % (key, label, cname, msg))
    return 1 if tot['DEFECT'] else 0


if __name__ == '__main__':
    sys.exit(main())
