# ctest driver for quark_quantize's failure paths (examples/onnx/CMakeLists.txt), issue 7 "Bad
# inputs": each case must exit non-zero, print a message naming the culprit on stderr and leave
# no output file behind. A valid run first proves the harness can see a success.
#   cmake -DTOOL=... -DDATA=tests/cli/data -DSOURCE=<checkout> -DWORK=... -P check_cli.cmake
# A folder of this run's own under WORK: two ctest runs of one build tree at once (two
# terminals, an IDE) would otherwise remove and rewrite each other's files.
string(RANDOM LENGTH 12 run_id)
set(WORK "${WORK}/${run_id}")
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/unknown_key.json "{\"extra_options\": {\"Int32Bais\": false}}")
file(COPY ${DATA}/conv.onnx DESTINATION ${WORK})
file(SHA256 ${WORK}/conv.onnx model_hash)

# expect(NAME EXIT_ZERO|EXIT_NONZERO OUT [MESSAGES fragment...] [NOT_MESSAGES fragment...]
#        ARGS args...): stderr must hold every MESSAGES fragment and none of NOT_MESSAGES.
function(expect name want out)
  cmake_parse_arguments(PARSE_ARGV 3 E "" "" "MESSAGES;NOT_MESSAGES;ARGS")
  execute_process(COMMAND ${TOOL} ${E_ARGS} -q RESULT_VARIABLE rc OUTPUT_VARIABLE o
                  ERROR_VARIABLE err)
  if(want STREQUAL "EXIT_ZERO")
    if(NOT rc EQUAL 0 OR NOT EXISTS ${out})
      message(FATAL_ERROR "${name}: expected success and ${out}, got exit ${rc}: ${err}")
    endif()
    return()
  endif()
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name}: expected a non-zero exit, got 0")
  endif()
  if(EXISTS ${out})
    message(FATAL_ERROR "${name}: ${out} was left behind")
  endif()
  foreach(m IN LISTS E_MESSAGES)
    string(FIND "${err}" "${m}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: expected \"${m}\" on stderr, got:\n${err}")
    endif()
  endforeach()
  foreach(m IN LISTS E_NOT_MESSAGES)
    string(FIND "${err}" "${m}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${name}: did not expect \"${m}\" on stderr, got:\n${err}")
    endif()
  endforeach()
endfunction()

set(model ${WORK}/conv.onnx)
set(out ${WORK}/q.onnx)
expect(valid EXIT_ZERO ${out} ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok)
file(REMOVE ${out})
# Dynamic quantization needs no calibration data.
expect(dynamic_no_data EXIT_ZERO ${out} ARGS ${model} ${out} --preset UINT8_DYNAMIC_QUANT)
file(REMOVE ${out})
expect(dynamic_eval_no_data EXIT_NONZERO ${out} MESSAGES "quark.quantize.no_data" "needs data"
       ARGS ${model} ${out} --preset UINT8_DYNAMIC_QUANT --eval 1)
# Neither does MatMulNBits weight-only quantization, unless its algorithm is GPTQ.
expect(nbits_no_data EXIT_ZERO ${out} ARGS ${model} ${out} --preset MATMUL_NBITS)
file(REMOVE ${out})
file(WRITE ${WORK}/nbits_gptq.json "{\"extra_options\": {\"UseMatMulNBits\": true, \"MatMulNBitsParams\": {\"Algorithm\": \"GPTQ\"}}, \"global_config\": {\"input_tensors\": null, \"weight\": null}}")
expect(nbits_gptq_no_data EXIT_NONZERO ${out} MESSAGES "quark.quantize.no_data" "GPTQ"
       ARGS ${model} ${out} --config ${WORK}/nbits_gptq.json)
# SmoothQuant and GPTQ (algo_config) run on calibration data (conv.onnx has no MatMul: both
# leave it alone and say so).
expect(smooth_quant_gptq EXIT_ZERO ${out}
       ARGS ${model} ${out} --config ${SOURCE}/examples/configs/a8w8_smooth_quant_gptq.json
            --calib-data ${DATA}/calib_ok)
file(REMOVE ${out})
expect(unsupported_op EXIT_NONZERO ${out} MESSAGES "quark.onnx.unsupported_op" "NoSuchOp"
       ARGS ${DATA}/unsupported.onnx ${out} --preset A8W8 --random)
expect(unknown_config_key EXIT_NONZERO ${out}
       MESSAGES "quark.config.unknown_key" "Int32Bais" "did you mean \"Int32Bias\""
       ARGS ${model} ${out} --config ${WORK}/unknown_key.json --random)
# A configuration its own file makes inconsistent (found after parsing): the error names the file.
file(WRITE ${WORK}/group0.json "{\"global_config\": {\"weight\": {\"spec\": \"Int8Spec\", \"quant_granularity\": \"Group\", \"group_size\": 0}}}")
expect(config_file_invalid EXIT_NONZERO ${out}
       MESSAGES "quark.config.value" "group0.json: global_config.weight:" "group_size > 0"
       ARGS ${model} ${out} --config ${WORK}/group0.json --random)
# One the command line makes inconsistent: the error does not blame the file.
file(WRITE ${WORK}/sym.json "{\"global_config\": {\"input_tensors\": {\"spec\": \"Int8Spec\", \"symmetric\": true}}}")
expect(config_cli_invalid EXIT_NONZERO ${out} MESSAGES "quark.config.conflict" "ActivationSymmetric"
       NOT_MESSAGES "sym.json"
       ARGS ${model} ${out} --config ${WORK}/sym.json --random --set ActivationSymmetric=false)
expect(unknown_preset EXIT_NONZERO ${out} MESSAGES "quark.config.unknown_preset" "A8W9"
       ARGS ${model} ${out} --preset A8W9 --random)
expect(unknown_input_name EXIT_NONZERO ${out} MESSAGES "nope"
       ARGS ${model} ${out} --preset A8W8 --random --shape nope:1x3x8x8)
# --shape / --range values that do not parse, overflow or are not finite name the argument.
expect(shape_overflow EXIT_NONZERO ${out} MESSAGES "--shape" "bad dimension '99999999999999999999'"
       ARGS ${model} ${out} --preset A8W8 --random --shape x:99999999999999999999x3x8x8)
expect(range_not_a_number EXIT_NONZERO ${out} MESSAGES "--range 'x:a,1'" "bad number 'a'"
       ARGS ${model} ${out} --preset A8W8 --random --range x:a,1)
expect(range_infinite EXIT_NONZERO ${out} MESSAGES "--range 'x:0,1e999'" "bad number '1e999'"
       ARGS ${model} ${out} --preset A8W8 --random --range x:0,1e999)
expect(samples_zero EXIT_NONZERO ${out} MESSAGES "--samples: must be at least 1"
       ARGS ${model} ${out} --preset A8W8 --random --samples 0)
# Count options take whole numbers only: CLI11 alone would read these into an unsigned option
# wrapped around (--samples -3 became CalibDataSize -3, --eval -1 every sample).
expect(samples_negative EXIT_NONZERO ${out} MESSAGES "--samples" "expected a whole number, got '-3'"
       ARGS ${model} ${out} --preset A8W8 --random --samples -3)
expect(samples_overflow EXIT_NONZERO ${out}
       MESSAGES "--samples" "'99999999999999999999' is too large"
       ARGS ${model} ${out} --preset A8W8 --random --samples 99999999999999999999)
expect(eval_negative EXIT_NONZERO ${out} MESSAGES "--eval" "expected a whole number, got '-1'"
       ARGS ${model} ${out} --preset A8W8 --random --eval -1)
expect(eval_zero EXIT_NONZERO ${out} MESSAGES "--eval" "must be at least 1"
       ARGS ${model} ${out} --preset A8W8 --random --eval 0)
expect(seed_negative EXIT_NONZERO ${out} MESSAGES "--seed" "expected a whole number, got '-5'"
       ARGS ${model} ${out} --preset A8W8 --random --seed -5)
expect(infer_only_zero EXIT_NONZERO ${out} MESSAGES "--infer-only" "must be at least 1"
       ARGS ${model} ${out} --preset A8W8 --random --infer-only 0)
# A calibration "folder" that is a file is named as such.
expect(calib_data_file EXIT_NONZERO ${out} MESSAGES "quark.calib_data.folder" "is not a folder"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${model})
# A --tensors-json path that cannot be written fails before the model is written.
expect(tensors_json_missing_folder EXIT_NONZERO ${out}
       MESSAGES "--tensors-json '${WORK}/missing/t.json': no folder"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok
            --tensors-json ${WORK}/missing/t.json)
expect(tensors_json_is_folder EXIT_NONZERO ${out} MESSAGES "--tensors-json '${WORK}' is a folder"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok --tensors-json ${WORK})
expect(tensors_json_is_model EXIT_NONZERO ${out} MESSAGES "--tensors-json '${out}' is the model itself"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok --tensors-json ${out})
expect(wrong_calibration_shape EXIT_NONZERO ${out} MESSAGES "quark.calib_data.shape" "x"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_bad_shape)
expect(missing_output_folder EXIT_NONZERO ${WORK}/missing/q.onnx
       MESSAGES "quark.quantize.output_dir" "missing"
       ARGS ${model} ${WORK}/missing/q.onnx --preset A8W8 --random)
expect(output_is_input EXIT_NONZERO ${WORK}/none.onnx MESSAGES "is the input model" "refusing to overwrite"
       ARGS ${model} ${model} --preset A8W8 --random)
file(SHA256 ${model} after)
if(NOT after STREQUAL model_hash)
  message(FATAL_ERROR "output_is_input: the input model was modified")
endif()
expect(eval_data_missing EXIT_NONZERO ${out} MESSAGES "--eval-data" "no_such_eval"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok
            --eval-data ${WORK}/no_such_eval)
expect(eval_data_wrong_shape EXIT_NONZERO ${out}
       MESSAGES "quark.calib_data.shape" "evaluation sample 0" "x"
       ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok
            --eval-data ${DATA}/calib_bad_shape)
# --eval-data prints the metrics over that folder's samples (two), not the calibration data's
# (one).
foreach(s s0 s1)
  file(MAKE_DIRECTORY ${WORK}/eval2/${s})
  file(COPY ${DATA}/calib_ok/x.npy DESTINATION ${WORK}/eval2/${s})
endforeach()
execute_process(COMMAND ${TOOL} ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok
                        --eval-data ${WORK}/eval2 --no-summary
                RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE err)
string(FIND "${o}" "Evaluation against the float model (output 0, 2 samples)" at)
if(NOT rc EQUAL 0 OR at EQUAL -1 OR NOT EXISTS ${out})
  message(FATAL_ERROR "eval_data: expected success with the metrics, got exit ${rc}:\n${o}${err}")
endif()
file(REMOVE ${out})
expect(unknown_option EXIT_NONZERO ${out} MESSAGES "--no-such-flag"
       ARGS ${model} ${out} --preset A8W8 --random --no-such-flag)
# --set KEY=VALUE on top of a preset: the value reaches the configuration (a contradiction with
# the preset's spec is the configuration's own error), bad keys and values are named, a bare
# word is a string.
expect(set_applied EXIT_NONZERO ${out} MESSAGES "quark.config.conflict" "ActivationSymmetric = false"
       ARGS ${model} ${out} --preset A8W8 --random --set ActivationSymmetric=false)
expect(set_unknown EXIT_NONZERO ${out} MESSAGES "quark.config.unknown_key" "Bogus"
       ARGS ${model} ${out} --preset A8W8 --random --set Bogus=1)
expect(set_type EXIT_NONZERO ${out} MESSAGES "quark.config.type" "Percentile"
       ARGS ${model} ${out} --preset A8W8 --random --set "Percentile=[1]")
expect(set_malformed EXIT_NONZERO ${out} MESSAGES "--set 'NumBins'" "KEY=VALUE"
       ARGS ${model} ${out} --preset A8W8 --random --set NumBins)
expect(set_string EXIT_ZERO ${out} ARGS ${model} ${out} --preset A8W8 --calib-data ${DATA}/calib_ok
       --set MinMSEModeFloatScale=HistCenter --set SimplifyModel=false)
file(REMOVE ${out})

# --print-config: the preset with --set applied, as the JSON --config reads; quantizing with that
# file writes the bytes the preset and --set write. Without it MODEL and OUT are required.
execute_process(COMMAND ${TOOL} --preset XINT8 --set SimplifyModel=false --print-config
                RESULT_VARIABLE rc OUTPUT_FILE ${WORK}/xint8.json ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "print_config: expected exit 0, got ${rc}: ${err}")
endif()
file(READ ${WORK}/xint8.json printed)
string(FIND "${printed}" "\"SimplifyModel\": false" at)
if(at EQUAL -1)
  message(FATAL_ERROR "print_config: expected the --set value in:\n${printed}")
endif()
expect(print_config_preset EXIT_ZERO ${out} ARGS ${model} ${out} --preset XINT8
       --set SimplifyModel=false --calib-data ${DATA}/calib_ok)
file(SHA256 ${out} from_preset)
file(REMOVE ${out})
expect(print_config_file EXIT_ZERO ${out} ARGS ${model} ${out} --config ${WORK}/xint8.json
       --calib-data ${DATA}/calib_ok)
file(SHA256 ${out} from_file)
file(REMOVE ${out})
if(NOT from_preset STREQUAL from_file)
  message(FATAL_ERROR "print_config: the printed configuration quantizes differently")
endif()
expect(no_out EXIT_NONZERO ${out} MESSAGES "MODEL and OUT are required" ARGS ${model})

# --list-presets: every preset name (aliases in parentheses) with its description, exit 0,
# without MODEL / OUT.
execute_process(COMMAND ${TOOL} --list-presets RESULT_VARIABLE rc OUTPUT_VARIABLE o
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "list_presets: expected exit 0, got ${rc}: ${err}")
endif()
foreach(m "XINT8 " "S8S8_AAWS (S8S8)" "INT8_CNN_ACCURATE" "U16S8_AAWS_ADAQUANT" "MXINT8")
  string(FIND "${o}" "${m}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "list_presets: expected \"${m}\" in:\n${o}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
