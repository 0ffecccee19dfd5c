# The optional tokenizer component: target dsv32_tokenizer (alias dsv32::tokenizer) =
# the header-only core (dsv32::dsv32) + PCRE2, the regex engine of the pre-tokenizer.
# The core target does not depend on PCRE2; only code that links dsv32::tokenizer does.
#
# Included by the top-level CMakeLists.txt when DSV32_BUILD_TOKENIZER is ON.

find_package(PCRE2 10.40)  # cmake/FindPCRE2.cmake
if(NOT PCRE2_FOUND)
  message(FATAL_ERROR
    "dsv32: the tokenizer component needs PCRE2 >= 10.40 with its headers "
    "(Debian/Ubuntu: apt-get install libpcre2-dev). "
    "Configure with -DDSV32_BUILD_TOKENIZER=OFF to build without the tokenizer.")
endif()

add_library(dsv32_tokenizer INTERFACE)
add_library(dsv32::tokenizer ALIAS dsv32_tokenizer)
set_target_properties(dsv32_tokenizer PROPERTIES EXPORT_NAME tokenizer)
target_link_libraries(dsv32_tokenizer INTERFACE dsv32::dsv32 PCRE2::pcre2-8)

if(DSV32_INSTALL)
  # A separate export set, so the core package does not depend on PCRE2. dsv32Config.cmake loads
  # it with: include("${CMAKE_CURRENT_LIST_DIR}/dsv32-tokenizer.cmake" OPTIONAL)
  # (the headers are installed with the rest of include/).
  set(_dsv32_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/dsv32")
  install(TARGETS dsv32_tokenizer EXPORT dsv32TokenizerTargets)
  install(EXPORT dsv32TokenizerTargets
          FILE dsv32TokenizerTargets.cmake
          NAMESPACE dsv32::
          DESTINATION "${_dsv32_cmake_dir}")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/FindPCRE2.cmake"
                "${PROJECT_SOURCE_DIR}/cmake/dsv32-tokenizer.cmake"
          DESTINATION "${_dsv32_cmake_dir}")
  unset(_dsv32_cmake_dir)
endif()
