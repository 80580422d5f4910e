# ctest driver for quark_evaluate (examples/onnx/CMakeLists.txt): builds a baseline and two
# quantized folders from tests/metrics/data, runs the tool and checks its lines against the numpy
# reference values of tests/metrics/data/metrics_reference.txt (rounded as the tool prints them).
#   cmake -DTOOL=... -DDATA=... -DWORK=... -P check_evaluate.cmake
# A folder of this run's own under WORK: two ctest runs of one build tree at once (two
# terminals, an IDE) would otherwise remove and rewrite each other's files.
string(RANDOM LENGTH 12 run_id)
set(WORK "${WORK}/${run_id}")

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/base ${WORK}/quant ${WORK}/zero)
foreach(name a b)
  configure_file(${DATA}/metrics_x.npy ${WORK}/base/${name}.npy COPYONLY)
  configure_file(${DATA}/metrics_y.npy ${WORK}/quant/${name}.npy COPYONLY)
endforeach()
configure_file(${DATA}/metrics_y.npy ${WORK}/zero/a.npy COPYONLY)
configure_file(${DATA}/metrics_zero.npy ${WORK}/zero/b.npy COPYONLY)

function(run_and_expect dir)
  execute_process(COMMAND ${TOOL} --baseline ${WORK}/base --quantized ${WORK}/${dir}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "quark_evaluate (${dir}) failed (${rc}): ${err}")
  endif()
  foreach(line IN LISTS ARGN)
    string(FIND "${out}" "${line}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "quark_evaluate (${dir}): expected \"${line}\" in:\n${out}")
    endif()
  endforeach()
endfunction()

# numpy: cosine 0.99739629..., l2 225.124977..., psnr 26.2623254..., ssim 0.918177545...
run_and_expect(quant "Files compared: 2" "Mean cos similarity: 0.9974" "Min cos similarity: 0.9974"
               "Mean l2 distance: 225.1" "Mean psnr: 26.26" "Mean ssim: 0.9182")
# One all-zero output: its cosine is undefined and reported, the mean is over the other file.
run_and_expect(zero "Files compared: 2" "Mean cos similarity: 0.9974"
               "cosine undefined for 1 file(s)")

# Files on one side only: compared over the pairs, with a line for each side's leftovers.
file(MAKE_DIRECTORY ${WORK}/extra)
foreach(name a b c)
  configure_file(${DATA}/metrics_y.npy ${WORK}/extra/${name}.npy COPYONLY)
endforeach()
file(REMOVE ${WORK}/extra/b.npy)
execute_process(COMMAND ${TOOL} --baseline ${WORK}/base --quantized ${WORK}/extra
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
foreach(want "1 baseline file(s) have no quantized match" "1 quantized file(s) have no baseline match")
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "quark_evaluate (extra): expected exit 0 and \"${want}\", got ${rc}:\n"
                        "${out}${err}")
  endif()
endforeach()
string(FIND "${out}" "Files compared: 1" at)
if(at EQUAL -1)
  message(FATAL_ERROR "quark_evaluate (extra): expected \"Files compared: 1\" in:\n${out}")
endif()

# Inputs without metrics: an error naming the file (and the element), exit 1.
function(expect_error name want)
  file(REMOVE_RECURSE ${WORK}/${name})
  file(MAKE_DIRECTORY ${WORK}/${name}/base ${WORK}/${name}/quant)
  configure_file(${DATA}/${ARGV2} ${WORK}/${name}/base/o.npy COPYONLY)
  configure_file(${DATA}/${ARGV3} ${WORK}/${name}/quant/o.npy COPYONLY)
  execute_process(COMMAND ${TOOL} --baseline ${WORK}/${name}/base --quantized ${WORK}/${name}/quant
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 1 OR at EQUAL -1)
    message(FATAL_ERROR "quark_evaluate (${name}): expected exit 1 and \"${want}\", got ${rc}:\n"
                        "${out}${err}")
  endif()
endfunction()
# metrics_bad.npy: float32 [NaN, 1, 2]; metrics_inf.npy [1, inf, 2];
# metrics_empty.npy shape (0, 3) (gen_bad_inputs.py); metrics_x.npy is [2, 16, 20].
expect_error(nan "base/o.npy': element 0 is NaN" metrics_bad.npy metrics_inf.npy)
expect_error(inf "base/o.npy': element 1 is infinite" metrics_inf.npy metrics_bad.npy)
expect_error(empty "'o.npy' is empty (shape [0,3])" metrics_empty.npy metrics_empty.npy)
expect_error(shapes "'o.npy': shapes differ ([" metrics_x.npy metrics_bad.npy)
# --ssim-range must be a finite L > 0 (L = 0 gave SSIM NaN, a negative L a wrong number).
foreach(bad 0 -255 nan inf 1e400)
  execute_process(COMMAND ${TOOL} --baseline ${WORK}/base --quantized ${WORK}/quant --ssim-range ${bad}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "--ssim-range: expected a finite number > 0, got '${bad}'" at)
  if(rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "quark_evaluate (--ssim-range ${bad}): expected a non-zero exit and the "
                        "option named, got ${rc}:\n${out}${err}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
