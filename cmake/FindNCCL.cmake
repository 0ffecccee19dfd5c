# FindNCCL
# --------
# Finds NCCL (NVIDIA's collective communication library: nccl.h and libnccl), which the optional
# dsv32::nccl component uses. Looks in NCCL_ROOT (variable or environment), then next to the CUDA
# toolkit (CUDA 13 ships NCCL under /usr/local/cuda), then in the system's default places. A
# pip-installed NCCL (the nvidia-nccl-cu13 wheel) is found by pointing NCCL_ROOT at the wheel's
# nvidia/nccl folder: its library is libnccl.so.2 with no unversioned link, which this module accepts.
#
# Imported target:
#   NCCL::nccl           the shared library, with its include directory
#
# Result variables:
#   NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIR, NCCL_LIBRARY
#
# Honours find_package(NCCL <version>).

set(_nccl_hints)
foreach(root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_ROOT}"
                      "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}")
  if(root)
    list(APPEND _nccl_hints "${root}")
  endif()
endforeach()
find_path(NCCL_INCLUDE_DIR NAMES nccl.h
          HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
unset(_nccl_hints)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  set(NCCL_VERSION)
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part}[ \t]+([0-9]+)" _nccl_match "${_nccl_version_lines}")
    list(APPEND NCCL_VERSION "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN NCCL_VERSION "." NCCL_VERSION)
  unset(_nccl_version_lines)
  unset(_nccl_match)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
