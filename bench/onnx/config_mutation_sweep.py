#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Mutation sweep of the JSON configuration: every key given values of every JSON kind.

mutation_sweep.py and pass_mutation_sweep.py mutate models. This script mutates the
configuration instead: it starts from a valid config (Int8Spec activations and weights) and
sets one field at a time to a value from VALUES (booleans, zero, negative, 2^31, 2^40, 2^63,
-2^63, 1e300, tiny and fractional numbers, strings, a broken regex, lists, nested lists,
objects, null). The fields:
  extra     every extra_options key of docs/config.md section 7 (its table)
  algo      every parameter of every algo_config entry (docs/config.md section 5), one entry
            at a time, plus the entry's name itself
  spec      every tensor_spec field of input_tensors / weight for a few specs (Int8Spec,
            XInt8Spec, Int4Spec, FP8E4M3FNSpec, BFP16Spec, MX6Spec, MXFP4E2M1Spec), the
            block fields included
  top       the QConfig fields (specific_layer_config, layer_type_config, exclude,
            use_external_data_format, use_dynamic_quant) and whole global_config parts
  nested    structured keys with bad members (QDQOpTypePerChannelSupportToAxis,
            TensorQuantOverrides, MatMulNBitsParams, BFPAttributes, MXAttributes,
            RandomDataReaderInputShape / DataRange, RemoveQDQBetweenOps, FixShapes)
  ranges    the calibration files SaveAndRestore restores and TensorsRangeFile reads: a valid
            file of the model's tensors with one field (samples, version, a tensor's type,
            shape, range, or a range's min / max / pof2_position / scale / zero_point /
            warnings / origin) set to each value, with Int8Spec and XInt8Spec
Each mutant runs `quark_quantize model.onnx q.onnx --config c.json --calib-data cal -q
--no-summary` in its own folder (the working directory too: a path option such as
SaveAndRestore or TmpDir set to "bogus" stays inside it) on a small Conv + MatMul model.

Outcomes as in mutation_sweep.py (ok; error: exit 1 with 'quark_quantize: error: quark.<id>';
DEFECT: anything else: a signal, a sanitizer report, a timeout, an exception that is not the
project's, such as a JSON library type error), plus: an error that leaves q.onnx behind, or an
ok without it, is a DEFECT. A timeout of an AdaRound / AdaQuant / CLE run asked for 2^31 or more
iterations is `slow`: the work the configuration asks for.

Build the tool with ASan + UBSan (docs/bench/robustness.md), then

    bench/onnx/config_mutation_sweep.py QUARK_QUANTIZE OUT_DIR [--jobs 2] [--seed 1]
        [--limit 0] [--only extra|algo|spec|top|nested|ranges] [--timeout 30]
        [--base int8|xint8|bfp16|u16i4]

--limit N runs a seeded sample of N mutants (0: all). Results: OUT_DIR/results.json.
"""
import argparse
import collections
import concurrent.futures
import copy
import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutation_sweep as ms  # noqa: E402  (classify)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

VALUES = [True, False, 0, 1, -1, 3, 2**31, 2**40, 2**63, -2**63, 1e300, -1e300, 0.5, -0.5,
          1e-300, '', 'bogus', '^(', [], [0], [-1, 2**40], ['x'], [[]], [1e300, -1e300], {},
          {'x': -1}, {'x': [2**40]}, None]

SPECS = ['Int8Spec', 'XInt8Spec', 'Int4Spec', 'FP8E4M3FNSpec', 'BFP16Spec', 'MX6Spec',
         'MXFP4E2M1Spec']
SPEC_FIELDS = ['spec', 'symmetric', 'scale_type', 'calibration_method', 'quant_granularity',
               'group_size', 'axis', 'block']
BLOCK_FIELDS = ['method', 'block_size', 'bit_width', 'sub_block_size', 'sub_block_shift_bits',
                'rounding_mode']

BASES = {
    'int8': {'global_config': {'input_tensors': 'Int8Spec', 'weight': 'Int8Spec'}},
    # power-of-two MinMSE and the NPU-CNN flow
    'xint8': {'global_config': {'input_tensors': 'XInt8Spec', 'weight': 'XInt8Spec'}},
    # block formats (no calibration)
    'bfp16': {'global_config': {'input_tensors': 'BFP16Spec', 'weight': 'BFP16Spec'}},
    # uint16 asymmetric activations, int4 per-channel weights
    'u16i4': {'global_config': {'input_tensors': 'UInt16Spec',
                                'weight': {'spec': 'Int4Spec', 'quant_granularity': 'Channel'}}},
}
BASE = BASES['int8']  # --base replaces it


def extra_keys():
    keys = []
    with open(os.path.join(ROOT, 'docs', 'config.md')) as f:
        for line in f:
            m = re.match(r'^\| `([A-Za-z0-9_]+)` \| [0-9]+ \|', line)
            if m:
                keys.append(m.group(1))
    if len(keys) < 100:
        sys.exit('docs/config.md: expected the extra_options table (found %d keys)' % len(keys))
    return keys


def algo_params():
    """{algorithm: [parameter, ...]} from docs/config.md section 5."""
    text = open(os.path.join(ROOT, 'docs', 'config.md')).read()
    out = {}
    for m in re.finditer(r'^\| `([a-z_]+)` \(`[A-Za-z]+Config`\) \| (.*) \|$', text, re.M):
        name, params = m.group(1), m.group(2)
        out[name] = sorted(set(re.findall(r'(?:^|, )([a-z_]+) ', params)) -
                           {'as', 'none', 'all'})
    # The AdaRound / AdaQuant parameter table lists the rest.
    sec = text[text.find('AdaRoundConfig / AdaQuantConfig parameters'):]
    sec = sec[:sec.find('## 6.')]
    extra = set(re.findall(r'`([a-z_]+)`', sec)) - {'adaround', 'adaquant'}
    for name in ('adaround', 'adaquant'):
        out[name] = sorted(set(out.get(name, [])) | extra)
    out['auto_mixprecision'] = sorted(set(out['auto_mixprecision']) |
                                      {'act_target_quant_type', 'weight_target_quant_type',
                                       'bias_target_quant_type'})
    if len(out) < 7:
        sys.exit('docs/config.md: expected the algo_config table (found %s)' % sorted(out))
    return out


def model():
    rng = np.random.default_rng(3)
    w = rng.uniform(-0.5, 0.5, size=[4, 3, 3, 3]).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, size=[4]).astype(np.float32)
    m = rng.uniform(-0.5, 0.5, size=[256, 8]).astype(np.float32)
    mb = rng.uniform(-0.5, 0.5, size=[8]).astype(np.float32)
    shape = np.array([1, 256], np.int64)
    nodes = [
        helper.make_node('Conv', ['x', 'w', 'b'], ['c'], name='conv', pads=[1, 1, 1, 1]),
        helper.make_node('Relu', ['c'], ['r'], name='relu'),
        helper.make_node('Reshape', ['r', 'shape'], ['f'], name='flatten'),
        helper.make_node('MatMul', ['f', 'm'], ['mm'], name='matmul'),
        helper.make_node('Add', ['mm', 'mb'], ['y'], name='add'),
    ]
    g = helper.make_graph(
        nodes, 'config_sweep',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b'),
         numpy_helper.from_array(m, 'm'), numpy_helper.from_array(mb, 'mb'),
         numpy_helper.from_array(shape, 'shape')])
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])


def mutants():
    res = []

    def add(group, label, cfg):
        res.append((group, label, cfg))

    for key in extra_keys():
        for v in VALUES:
            cfg = copy.deepcopy(BASE)
            cfg['extra_options'] = {key: v}
            add('extra', '%s = %s' % (key, json.dumps(v)), cfg)
    for name, params in sorted(algo_params().items()):
        for v in VALUES:
            cfg = copy.deepcopy(BASE)
            cfg['algo_config'] = [{'name': v}]
            add('algo', 'name = %s' % json.dumps(v), cfg)
            break
        for p in params:
            for v in VALUES:
                entry = {'name': name, p: v}
                if name in ('adaround', 'adaquant') and p != 'num_iterations':
                    entry['num_iterations'] = 3
                if name == 'auto_mixprecision' and p not in ('act_target_quant_type',
                                                             'target_quant_type'):
                    entry['act_target_quant_type'] = 'QInt16'
                cfg = copy.deepcopy(BASE)
                cfg['algo_config'] = [entry]
                add('algo', '%s.%s = %s' % (name, p, json.dumps(v)), cfg)
    for spec in SPECS:
        for part in ('input_tensors', 'weight'):
            for field in SPEC_FIELDS + ['block.' + f for f in BLOCK_FIELDS]:
                for v in VALUES:
                    s = {'spec': spec}
                    if field.startswith('block.'):
                        s['block'] = {field[6:]: v}
                    else:
                        s[field] = v
                    cfg = copy.deepcopy(BASE)
                    cfg['global_config'][part] = s
                    add('spec', '%s %s.%s = %s' % (spec, part, field, json.dumps(v)), cfg)
    for field in ('specific_layer_config', 'layer_type_config', 'exclude',
                  'use_external_data_format', 'use_dynamic_quant', 'global_config'):
        for v in VALUES + [[{}], [{'config': None, 'layers': ['conv']}],
                           [{'config': 'Int8Spec', 'op_types': [2**40]}],
                           [{'start_nodes': [], 'end_nodes': ['add']}], [[['conv'], []]],
                           [['conv', 'add']], ['^(']]:
            cfg = copy.deepcopy(BASE)
            cfg[field] = v
            add('top', '%s = %s' % (field, json.dumps(v)), cfg)
        for part in ('input_tensors', 'output_tensors', 'weight', 'bias'):
            for v in VALUES:
                cfg = copy.deepcopy(BASE)
                cfg['global_config'][part] = v
                add('top', 'global_config.%s = %s' % (part, json.dumps(v)), cfg)
    nested = {
        'QDQOpTypePerChannelSupportToAxis': [{'Conv': 2**40}, {'Conv': -5}, {'MatMul': 7},
                                             {'Conv': None}, {'': 1}, {'Conv': 1.5}],
        'TensorQuantOverrides': [
            {'c': [{'scale': 0.0, 'zero_point': 0}]}, {'c': [{'scale': -1.0, 'zero_point': 0}]},
            {'c': [{'scale': 1e300, 'zero_point': 2**40}]}, {'c': [{'scale': 1.0}]},
            {'c': [{'quant_type': 'bogus'}]}, {'c': [{'rmin': 5.0, 'rmax': -5.0}]},
            {'c': [{'rmin': -1e300, 'rmax': 1e300}]}, {'w': [{'axis': 2**40}]},
            {'w': [{'axis': -7, 'quant_type': 'QInt8'}]}, {'nothere': [{'scale': 1.0,
                                                                         'zero_point': 0}]},
            {'c': []}, {'c': [{}]}, {'c': [{'symmetric': 'yes'}]},
            {'w': [{'quant_type': 'QInt4', 'symmetric': True}]},
            {'c': [{'quant_type': 'QUInt16', 'reduce_range': True}]}],
        'MatMulNBitsParams': [{'GroupSize': 0}, {'GroupSize': -1}, {'GroupSize': 2**40},
                              {'GroupSize': 3}, {'Bits': 2**40}, {'Algorithm': 'bogus'},
                              {'AccuracyLevel': -3}, {'Symmetric': 'no'}],
        'BFPAttributes': [{'block_size': 0}, {'block_size': 2**40}, {'bit_width': 99},
                          {'rounding_mode': -1}, {'axis': 2**40}, {'bfp_method': 'bogus'},
                          {'sub_block_size': 0}],
        'MXAttributes': [{'block_size': 0}, {'block_size': -32}, {'element_dtype': 'bogus'},
                         {'axis': -2**40}, {'rounding_mode': 2**40}],
        'RandomDataReaderInputShape': [{'x': [0, 3, 8, 8]}, {'x': [-1]}, {'x': [2**40, 2**40]},
                                       {'x': []}, {'y': [1]}, {'x': [1, 3, 8, 8, 1]}],
        'RandomDataReaderInputDataRange': [{'x': [1, 0]}, {'x': [0, 0]}, {'x': [-1e300, 1e300]},
                                           {'x': [1]}, {'x': [0, 1, 2]}, {'y': [0, 1]}],
        'RemoveQDQBetweenOps': [[['Conv']], [['Conv', 'Relu', 'Add']], [[1, 2]], [[]]],
        'FixShapes': ['x:[1,3,8,8]', 'x:[0,3,8,8]', 'x:[-1]', 'x:[99999999999999999999]',
                      'x:[', ':[1]', 'y:[1,3,8,8]', 'x:[1,3,8,8];x:[1,3,8,8]'],
    }
    for key, vals in nested.items():
        for v in vals:
            cfg = copy.deepcopy(BASE)
            cfg['extra_options'] = {key: v}
            if key.startswith('RandomData'):
                cfg['extra_options']['UseRandomData'] = True
            if key == 'MatMulNBitsParams':
                cfg['extra_options']['UseMatMulNBits'] = True
            if key == 'BFPAttributes':
                cfg['global_config'] = {'input_tensors': 'BFP16Spec', 'weight': 'BFP16Spec'}
            if key == 'MXAttributes':
                cfg['global_config'] = {'input_tensors': 'MXFP8E4M3Spec',
                                        'weight': 'MXFP8E4M3Spec'}
            add('nested', '%s = %s' % (key, json.dumps(v)), cfg)
    # Calibration files (SaveAndRestore restores one when it exists; TensorsRangeFile reads one):
    # a valid file of the model's tensors, one field of one tensor set to each value.
    ranges = {'x': [-2.0, 2.0], 'c': [-3.0, 3.0], 'r': [0.0, 3.0], 'f': [0.0, 3.0],
              'mm': [-5.0, 5.0], 'y': [-5.0, 5.0]}
    shapes = {'x': [1, 3, 8, 8], 'c': [1, 4, 8, 8], 'r': [1, 4, 8, 8], 'f': [1, 256],
              'mm': [1, 8], 'y': [1, 8]}

    def range_file():
        return {'format': 'quark-cpp calibration', 'version': 1, 'samples': 1,
                'tensors': {n: {'type': 'float32', 'shape': shapes[n],
                                'range': {'min': lo, 'max': hi}} for n, (lo, hi) in
                            ranges.items()}}
    for key in ('SaveAndRestore', 'TensorsRangeFile'):
        for spec in ('Int8Spec', 'XInt8Spec'):
            targets = [('samples', None), ('version', None)]
            targets += [(f, t) for t in ('r', 'y') for f in ('type', 'shape', 'range')]
            targets += [('range.' + f, t) for t in ('r', 'y') for f in
                        ('min', 'max', 'pof2_position', 'scale', 'zero_point', 'warnings',
                         'origin')]
            for field, t in targets:
                for v in VALUES:
                    doc = range_file()
                    if t is None:
                        doc[field] = v
                    elif field.startswith('range.'):
                        doc['tensors'][t]['range'][field[6:]] = v
                    else:
                        doc['tensors'][t][field] = v
                    cfg = {'global_config': {'input_tensors': spec, 'weight': spec},
                           'extra_options': {key: 'ranges.json'}, FILES: {'ranges.json': doc}}
                    add('ranges', '%s %s %s%s = %s' % (key, spec, '' if t is None else t + '.',
                                                       field, json.dumps(v)), cfg)
    return res


FILES = '__files__'  # a mutant's extra files: {name: JSON document}, written beside c.json


def run_one(quantizer, work, cfg, timeout):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, 'cal', 's0'))
    onnx.save(model(), os.path.join(work, 'model.onnx'))
    rng = np.random.default_rng(5)
    np.save(os.path.join(work, 'cal', 's0', 'x.npy'),
            rng.uniform(-2, 2, size=[1, 3, 8, 8]).astype(np.float32))
    cfg = dict(cfg)
    for name, doc in cfg.pop(FILES, {}).items():
        with open(os.path.join(work, name), 'w') as f:
            json.dump(doc, f)
    with open(os.path.join(work, 'c.json'), 'w') as f:
        json.dump(cfg, f)
    cmd = [quantizer, 'model.onnx', 'q.onnx', '--config', 'c.json', '--calib-data', 'cal', '-q',
           '--no-summary']
    env = dict(os.environ, ASAN_OPTIONS='detect_leaks=0',
               UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1')
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False, env=env,
                           cwd=work)
    except subprocess.TimeoutExpired:
        return 'DEFECT', 'timeout %d s' % timeout
    outcome, msg = ms.classify(p.returncode, p.stderr.decode(errors='replace').strip())
    written = os.path.exists(os.path.join(work, 'q.onnx'))
    if outcome == 'ok' and not written:
        return 'DEFECT', 'exit 0 without an output file'
    if outcome == 'error' and written:
        return 'DEFECT', 'error, but the output file was left behind: ' + msg
    return outcome, msg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('quantizer')
    ap.add_argument('out_dir')
    ap.add_argument('--only', default='',
                    help='one group: extra, algo, spec, top, nested, ranges')
    ap.add_argument('--limit', type=int, default=0)
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=30)
    ap.add_argument('--base', choices=sorted(BASES), default='int8',
                    help='the valid config each mutant starts from (the global specs; groups '
                    'spec and ranges set their own)')
    a = ap.parse_args()
    global BASE
    BASE = BASES[a.base]
    quantizer = os.path.abspath(a.quantizer)
    os.makedirs(a.out_dir, exist_ok=True)
    muts = [m for m in mutants() if not a.only or m[0] == a.only]
    if a.limit and len(muts) > a.limit:
        muts = random.Random(a.seed).sample(muts, a.limit)
    # The unmutated config first: it must quantize (else the sweep tests nothing).
    muts = [('base', 'unmutated', BASE)] + muts
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = {ex.submit(run_one, quantizer, os.path.join(a.out_dir, str(k)), m[2],
                          a.timeout): (k, m) for k, m in enumerate(muts)}
        for f in concurrent.futures.as_completed(futs):
            k, (group, label, cfg) = futs[f]
            outcome, msg = f.result()
            # A timeout on an iteration count of 2^31 or more is the work the config asks
            # for (Quark has no bound either), not a hang.
            if (outcome == 'DEFECT' and msg.startswith('timeout') and
                    re.search(r'\.(num_iterations|cle_steps) = (2147483648|1099511627776)$',
                              label)):
                outcome = 'slow'
            if group == 'base' and outcome != 'ok':
                outcome, msg = 'DEFECT', 'the unmutated config does not quantize: ' + msg
            results[str(k)] = [group, label, outcome, msg]
            if outcome != 'DEFECT':
                shutil.rmtree(os.path.join(a.out_dir, str(k)), ignore_errors=True)
    with open(os.path.join(a.out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    table = collections.defaultdict(collections.Counter)
    for group, label, outcome, msg in results.values():
        table[group][outcome] += 1
    print('%-10s %6s %6s %6s %6s %6s' % ('group', 'muts', 'ok', 'error', 'slow', 'DEFECT'))
    for key in sorted(table):
        c = table[key]
        print('%-10s %6d %6d %6d %6d %6d' % (key, sum(c.values()), c['ok'], c['error'], c['slow'],
                                             c['DEFECT']))
    tot = collections.Counter(v[2] for v in results.values())
    print('%-10s %6d %6d %6d %6d %6d' % ('total', len(results), tot['ok'], tot['error'],
                                         tot['slow'], tot['DEFECT']))
    for key, (group, label, outcome, msg) in sorted(results.items(), key=lambda kv: int(kv[0])):
        if outcome == 'DEFECT':
            print('DEFECT %s [%s] %s:\n    %s' % (key, group, label, msg))
    return 1 if tot['DEFECT'] else 0


if __name__ == '__main__':
    sys.exit(main())
