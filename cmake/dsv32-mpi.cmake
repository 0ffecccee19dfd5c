# Installed next to dsv32Config.cmake; loaded by it when present. Defines dsv32::mpi (the optional
# MPI component) after finding its MPI dependency.
include(CMakeFindDependencyMacro)
find_dependency(MPI COMPONENTS CXX)
include("${CMAKE_CURRENT_LIST_DIR}/dsv32MpiTargets.cmake")
