# Dependency detection. hwloc, nlohmann-json and OpenSSL's libcrypto are required; UCX,
# ibverbs, CUDA and NCCL follow their TPCOMM_WITH_* option: AUTO uses what is found, ON fails
# when missing, OFF leaves it out.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
# The tools' command lines (header-only; Debian: libcli11-dev).
find_package(CLI11 REQUIRED CONFIG)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.0)
# JSON (header-only) and libcrypto's HMAC-SHA256, both used inside libtpcomm only.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(OpenSSL 1.1 REQUIRED COMPONENTS Crypto)

# tpcomm_resolve(NAME FOUND DETAIL): sets TPCOMM_HAVE_<NAME> (0/1) and a summary text.
function(tpcomm_resolve name found detail)
  set(mode "${TPCOMM_WITH_${name}}")
  string(TOUPPER "${mode}" mode)
  if(mode STREQUAL "OFF")
    set(TPCOMM_HAVE_${name} 0 PARENT_SCOPE)
    set(TPCOMM_HAVE_${name}_TEXT "off (TPCOMM_WITH_${name}=OFF)" PARENT_SCOPE)
  elseif(found)
    set(TPCOMM_HAVE_${name} 1 PARENT_SCOPE)
    set(TPCOMM_HAVE_${name}_TEXT "yes ${detail}" PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "TPCOMM_WITH_${name}=ON but it was not found: ${detail}")
  else()
    set(TPCOMM_HAVE_${name} 0 PARENT_SCOPE)
    set(TPCOMM_HAVE_${name}_TEXT "no (not found: ${detail})" PARENT_SCOPE)
  endif()
endfunction()

pkg_check_modules(UCX IMPORTED_TARGET ucx)
tpcomm_resolve(UCX "${UCX_FOUND}" "${UCX_VERSION}")
if(NOT UCX_FOUND)
  set(TPCOMM_HAVE_UCX_TEXT "${TPCOMM_HAVE_UCX_TEXT} install libucx-dev")
endif()

find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
if(IBVERBS_INCLUDE_DIR)
  set(_ib_found TRUE)
else()
  set(_ib_found FALSE)
endif()
tpcomm_resolve(IBVERBS "${_ib_found}" "(headers ${IBVERBS_INCLUDE_DIR}; libibverbs loaded at run time)")

set(CUDAToolkit_ROOT /usr/local/cuda CACHE PATH "CUDA toolkit root")
find_package(CUDAToolkit QUIET)
tpcomm_resolve(CUDA "${CUDAToolkit_FOUND}" "${CUDAToolkit_VERSION} ${CUDAToolkit_LIBRARY_ROOT}")

find_path(NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS})
find_library(NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 ${CUDAToolkit_LIBRARY_DIR})
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TPCOMM_HAVE_CUDA)
  set(_nccl_found TRUE)
else()
  set(_nccl_found FALSE)
endif()
tpcomm_resolve(NCCL "${_nccl_found}" "${NCCL_LIBRARY}")

if(TPCOMM_BUILD_TESTS)
  find_package(GTest)
endif()
if(TPCOMM_BUILD_BENCH)
  find_package(benchmark QUIET)
endif()
