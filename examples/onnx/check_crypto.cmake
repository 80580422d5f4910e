# ctest driver for quark_quantize in CryptoMode (seed 000 category 10; docs/config.md): a crypto
# run prints nothing on stdout or stderr and writes only the output model; the options that
# write side files are refused (non-zero exit, a message naming the conflict, no output);
# EncryptionAlgorithm accepts only "AES-256". The same run without CryptoMode prints its summary
# and, since every run sets QUARK_CALIB_PROFILE, its calibration profile on stderr, so the
# silence is the option's doing (it also blocks that debug printout).
#   cmake -DTOOL=... -DDATA=tests/cli/data -DWORK=... -P check_crypto.cmake
# A folder of this run's own under WORK: two ctest runs of one build tree at once (two
# terminals, an IDE) would otherwise remove and rewrite each other's files.
string(RANDOM LENGTH 12 run_id)
set(WORK "${WORK}/${run_id}")
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(specs "\"global_config\": {\"input_tensors\": \"Int8Spec\", \"weight\": \"Int8Spec\"}")
function(config name extra)
  file(WRITE ${WORK}/${name}.json "{${specs}, \"extra_options\": {${extra}}}")
endfunction()
config(plain "\"PrintSummary\": true")
config(crypto "\"CryptoMode\": true")
config(crypto_aes "\"CryptoMode\": true, \"EncryptionAlgorithm\": \"AES-256\"")
config(crypto_hist "\"CryptoMode\": true, \"SaveTensorHistFig\": true")
config(crypto_restore "\"CryptoMode\": true, \"SaveAndRestore\": \"${WORK}/ranges.json\"")
config(bad_algorithm "\"CryptoMode\": true, \"EncryptionAlgorithm\": \"AES-128\"")
set(model ${DATA}/conv.onnx)
set(out ${WORK}/q.onnx)

function(run name)
  cmake_parse_arguments(PARSE_ARGV 1 R "" "" "ARGS")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env QUARK_CALIB_PROFILE=1
                          ${TOOL} ${model} ${out} --calib-data ${DATA}/calib_ok ${R_ARGS}
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE o
                  ERROR_VARIABLE e)
  set(rc ${rc} PARENT_SCOPE)
  set(o "${o}" PARENT_SCOPE)
  set(e "${e}" PARENT_SCOPE)
endfunction()

# Without CryptoMode the tool talks (summary, "Wrote ...", the calibration profile).
run(plain ARGS --config ${WORK}/plain.json)
if(NOT rc EQUAL 0 OR o STREQUAL "" OR NOT e MATCHES "calibration profile: ")
  message(FATAL_ERROR "plain: expected success with output on stdout and the calibration "
                      "profile on stderr, got exit ${rc}: ${o}${e}")
endif()
file(REMOVE ${out})

foreach(name crypto crypto_aes)
  run(${name} ARGS --config ${WORK}/${name}.json --eval 1)
  if(NOT rc EQUAL 0 OR NOT EXISTS ${out})
    message(FATAL_ERROR "${name}: expected success and ${out}, got exit ${rc}: ${e}")
  endif()
  if(NOT o STREQUAL "" OR NOT e STREQUAL "")
    message(FATAL_ERROR "${name}: CryptoMode must print nothing, got stdout:\n${o}\nstderr:\n${e}")
  endif()
  file(GLOB left RELATIVE ${WORK} ${WORK}/*)
  list(SORT left)
  set(expected ${name}.json bad_algorithm.json crypto.json crypto_aes.json crypto_hist.json
      crypto_restore.json plain.json q.onnx)
  list(REMOVE_DUPLICATES expected)
  list(SORT expected)
  if(NOT left STREQUAL expected)
    message(FATAL_ERROR "${name}: files besides the output model were written: ${left}")
  endif()
  file(REMOVE ${out})
endforeach()

function(refused name)
  cmake_parse_arguments(PARSE_ARGV 1 R "" "" "MESSAGES;ARGS")
  run(${name} ARGS ${R_ARGS})
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name}: expected a non-zero exit, got 0")
  endif()
  if(EXISTS ${out} OR EXISTS ${WORK}/tensor_hist OR EXISTS ${WORK}/ranges.json
     OR EXISTS ${WORK}/t.json)
    message(FATAL_ERROR "${name}: a file was left behind")
  endif()
  foreach(m IN LISTS R_MESSAGES)
    string(FIND "${e}" "${m}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: expected \"${m}\" on stderr, got:\n${e}")
    endif()
  endforeach()
endfunction()
refused(crypto_hist MESSAGES "quark.config.conflict" "SaveTensorHistFig"
        ARGS --config ${WORK}/crypto_hist.json)
refused(crypto_restore MESSAGES "quark.config.conflict" "SaveAndRestore"
        ARGS --config ${WORK}/crypto_restore.json)
refused(crypto_tensors_json MESSAGES "--tensors-json" "CryptoMode"
        ARGS --config ${WORK}/crypto.json --tensors-json ${WORK}/t.json)
refused(crypto_infer_only MESSAGES "--infer-only" "CryptoMode"
        ARGS --config ${WORK}/crypto.json --infer-only 1)
refused(bad_algorithm MESSAGES "EncryptionAlgorithm" "AES-256" "AES-128"
        ARGS --config ${WORK}/bad_algorithm.json)
file(REMOVE_RECURSE ${WORK})
