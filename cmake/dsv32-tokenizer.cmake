# Installed next to dsv32Config.cmake; loaded by it when present. Defines dsv32::tokenizer
# (the optional tokenizer component) after finding its PCRE2 dependency.
include(CMakeFindDependencyMacro)
list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")  # for FindPCRE2.cmake
find_dependency(PCRE2 10.40)
list(POP_FRONT CMAKE_MODULE_PATH)
include("${CMAKE_CURRENT_LIST_DIR}/dsv32TokenizerTargets.cmake")
