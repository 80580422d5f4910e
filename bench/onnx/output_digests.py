#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Digests of what quark_quantize writes for a matrix of models x configurations.

A guard for refactors that must not change the product: run it with the binary before and after
the change and diff the two files. Each line is one case: the SHA-256 of the written model (or
"no output"), the exit status and a digest of the messages (the summary table, the notes, the
evaluation; times removed), so a changed byte, a changed note or a new error all show.

    bench/onnx/output_digests.py build/release/examples/onnx/quark_quantize before.txt
    ... rebuild ...
    bench/onnx/output_digests.py build/release/examples/onnx/quark_quantize after.txt
    diff before.txt after.txt

Models: PaddleOCR det / cls / rec from .cache/models (scripts/fetch-models.sh; small shapes,
random calibration data with the fixed default seed) and the committed fuzz seed models.
Configurations: presets, examples/configs/*.json and JSON configurations that switch on the
options with their own code paths (overrides of type, dual pairs, dedicated pairs, groups,
contrib ops, bias forms, weight-only, the algorithms with few iterations).
Needs only Python 3 (no numpy / onnx). --only SUBSTRING runs the matching cases.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRESETS = [
    'XINT8', 'VINT8', 'A8W8', 'A16W8', 'S8S8', 'U8S8', 'S16S8', 'U16S8', 'U8U8', 'BF16', 'FP16',
    'BFP16', 'MX6', 'MX9_INT8', 'MXFP4E2M1', 'MXFP8E4M3', 'MXINT8', 'INT8_CNN_DEFAULT',
    'INT16_CNN_DEFAULT', 'INT8_TRANSFORMER_DEFAULT', 'UINT8_DYNAMIC_QUANT', 'MATMUL_NBITS',
    'S16S16_MIXED_S8S8', 'BF16_BFP16', 'BF16_MIXED_BFP16',
]

INT8 = {'input_tensors': 'Int8Spec', 'weight': 'Int8Spec'}


def json_configs():
    per_channel = {'input_tensors': 'Int8Spec',
                   'weight': {'spec': 'Int8Spec', 'quant_granularity': 'Channel'}}
    return {
        'per_channel_dedicated': {'global_config': per_channel, 'extra_options': {
            'DedicatedQDQPair': True, 'AddQDQPairToWeight': True, 'Int32Bias': True}},
        'int16_bias_contrib': {'global_config': {'input_tensors': 'Int16Spec',
                                                 'weight': 'Int8Spec'},
                               'extra_options': {'Int16Bias': True, 'UseQDQContribOps': True}},
        'no_bias_weights_only': {'global_config': INT8, 'extra_options': {
            'QuantizeBias': False, 'WeightsOnly': True}},
        'own_bias_scale': {'global_config': INT8, 'extra_options': {
            'Int32Bias': False, 'DedicateDQNode': True, 'DebugMode': True}},
        'groups_int4': {'global_config': {
            'input_tensors': 'Int8Spec',
            'weight': {'spec': 'Int4Spec', 'quant_granularity': 'Group', 'group_size': 8}}},
        'fp8': {'global_config': {'input_tensors': 'FP8E4M3FNSpec', 'weight': 'FP8E4M3FNSpec'}},
        'dual_pairs': {'global_config': INT8,
                       'layer_type_config': [{'config': {'input_tensors': 'Int16Spec',
                                                         'weight': 'Int8Spec'},
                                              'op_types': ['Add', 'Mul', 'Concat']}],
                       'extra_options': {'EnableDualQuantNodePairs': True}},
        'excluded_outputs': {'global_config': INT8, 'layer_type_config': [
            {'config': None, 'op_types': ['Sigmoid', 'Softmax']}],
            'extra_options': {'OpTypesToExcludeOutputQuantization': ['Conv', 'Resize'],
                              'ForceQuantizeNoInputCheck': True, 'MatMulConstBOnly': True}},
        'unsigned_relu_fold': {'global_config': {
            'input_tensors': {'spec': 'UInt8Spec', 'calibration_method': 'MinMax'},
            'weight': 'Int8Spec'},
                               'extra_options': {'UseUnsignedReLU': True, 'FoldRelu': True,
                                                 'CalibMovingAverage': True}},
        'calib_methods': {'global_config': {
            'input_tensors': {'spec': 'Int8Spec', 'calibration_method': 'Entropy'},
            'weight': {'spec': 'Int8Spec', 'calibration_method': 'MinMSE'}}},
        'lwp_pof2': {'global_config': {
            'input_tensors': {'spec': 'Int8Spec', 'calibration_method': 'LayerwisePercentile'},
            'weight': {'spec': 'Int8Spec', 'scale_type': 'PowerOf2'}}},
        'int16_scale': {'global_config': {
            'input_tensors': {'spec': 'Int8Spec', 'scale_type': 'Int16'},
            'weight': {'spec': 'Int8Spec', 'scale_type': 'Int16'}}},
        'passthrough_fill': {'global_config': INT8, 'extra_options': {
            'CalibPassthroughOpTypes': ['Relu', 'Clip'], 'FillAllValueInfo': True}},
        'adaround': {'global_config': per_channel,
                     'algo_config': [{'name': 'cle'},
                                     {'name': 'adaround', 'num_iterations': 5}]},
        'adaquant': {'global_config': INT8, 'algo_config': [
            {'name': 'adaquant', 'num_iterations': 5, 'update_bias': True}]},
        'bias_correction': {'global_config': INT8, 'algo_config': [
            {'name': 'cle', 'cle_steps': -1}, {'name': 'bias_correction'}]},
        'smooth_quant_gptq': {'global_config': INT8, 'algo_config': [
            {'name': 'smooth_quant', 'alpha': 0.5},
            {'name': 'gptq', 'bits': 4, 'group_size': 8}]},
        'auto_mp': {'global_config': INT8, 'algo_config': [
            {'name': 'auto_mixprecision', 'act_target_quant_type': 'QInt16',
             'l2_target': 0.0}]},
    }


def models(cache):
    ocr = os.path.join(cache, 'models', 'ocr-models', 'assets')
    out = [
        ('det', os.path.join(ocr, 'ch_PP-OCRv4_det_infer.onnx'), ['--shape', 'x:1x3x64x64']),
        ('cls', os.path.join(ocr, 'ch_ppocr_mobile_v2.0_cls_infer.onnx'),
         ['--shape', 'x:1x3x48x96']),
        ('rec', os.path.join(ocr, 'ch_PP-OCRv4_rec_infer.onnx'), ['--shape', 'x:1x3x48x64']),
    ]
    seeds = os.path.join(ROOT, 'tests', 'onnx_frontend', 'data', 'fuzz_regressions')
    for name in ('seed_conv_types', 'seed_relu', 'seed_constants'):
        out.append((name, os.path.join(seeds, name + '.onnx'), []))
    out.append(('bias_correction', os.path.join(ROOT, 'tests', 'onnx_frontend', 'data',
                                                'bias_correction', 'model.onnx'), []))
    return [m for m in out if os.path.exists(m[1])]


TIMES = re.compile(r'\(\d+(\.\d+)? s\)|\d+(\.\d+)?(e[-+]?\d+)? (ms|s)\b')


def run_case(q, model, shape, cfg_args, work):
    out = os.path.join(work, 'q.onnx')
    if os.path.exists(out):
        os.remove(out)
    cmd = [q, model, out] + cfg_args + ['--random', '--samples', '2'] + shape
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    text = TIMES.sub('<t>', p.stdout + p.stderr).replace(work, '<work>')
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if os.path.exists(out):
        with open(out, 'rb') as f:
            model_digest = hashlib.sha256(f.read()).hexdigest()[:16]
    else:
        model_digest = 'no-output'
    return '%s exit %d messages %s' % (model_digest, p.returncode, digest), text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('quantizer')
    ap.add_argument('out')
    ap.add_argument('--cache', default=os.path.join(ROOT, '.cache'))
    ap.add_argument('--only', default='')
    ap.add_argument('--messages', help='folder to write each case\'s messages into')
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cases = [(p, ['--preset', p]) for p in PRESETS]
        for f in sorted(os.listdir(os.path.join(ROOT, 'examples', 'configs'))):
            cases.append(('examples/' + f, ['--config',
                                            os.path.join(ROOT, 'examples', 'configs', f)]))
        for name, cfg in json_configs().items():
            path = os.path.join(work, name + '.json')
            with open(path, 'w') as f:
                json.dump(cfg, f)
            cases.append((name, ['--config', path]))
        lines = []
        for mname, mpath, shape in models(a.cache):
            for cname, args in cases:
                label = '%s %s' % (mname, cname)
                if a.only not in label:
                    continue
                line, text = run_case(a.quantizer, mpath, shape, args, work)
                lines.append('%s: %s' % (label, line))
                print(lines[-1], flush=True)
                if a.messages:
                    os.makedirs(a.messages, exist_ok=True)
                    with open(os.path.join(a.messages, label.replace('/', '_').replace(' ', '__')
                                           + '.txt'), 'w') as f:
                        f.write(text)
    with open(a.out, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
