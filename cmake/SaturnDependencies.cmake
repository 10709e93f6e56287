# Every dependency is a Debian 12 package (see INSTALL.md); CUDA comes from /usr/local/cuda.

find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "Saturn needs the *parallel* (MPI) build of HDF5 for collective checkpoints, but CMake found "
    "a serial one (${HDF5_C_LIBRARIES}). On Debian/Ubuntu: apt-get install libhdf5-openmpi-dev; "
    "on a cluster: module load a parallel hdf5 (see INSTALL.md).")
endif()
add_library(saturn_hdf5 INTERFACE)
target_include_directories(saturn_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(saturn_hdf5 INTERFACE ${HDF5_C_LIBRARIES} MPI::MPI_C)
target_compile_definitions(saturn_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

find_path(GLPK_INCLUDE_DIR glpk.h REQUIRED)
find_library(GLPK_LIBRARY glpk REQUIRED)
add_library(saturn_glpk INTERFACE)
target_include_directories(saturn_glpk SYSTEM INTERFACE ${GLPK_INCLUDE_DIR})
target_link_libraries(saturn_glpk INTERFACE ${GLPK_LIBRARY})

# CBC is optional: a second MILP backend behind the same interface.
find_path(CBC_INCLUDE_DIR Cbc_C_Interface.h PATH_SUFFIXES coin)
find_library(CBC_SOLVER_LIBRARY CbcSolver)
find_library(CBC_LIBRARY Cbc)
if(CBC_INCLUDE_DIR AND CBC_SOLVER_LIBRARY AND CBC_LIBRARY)
  set(SATURN_HAVE_CBC TRUE)
  find_library(OSICLP_LIBRARY OsiClp)
  find_library(CLP_LIBRARY Clp)
  find_library(OSI_LIBRARY Osi)
  find_library(COINUTILS_LIBRARY CoinUtils)
  find_library(CGL_LIBRARY Cgl)
  add_library(saturn_cbc INTERFACE)
  target_include_directories(saturn_cbc SYSTEM INTERFACE ${CBC_INCLUDE_DIR})
  target_link_libraries(saturn_cbc INTERFACE ${CBC_SOLVER_LIBRARY} ${CBC_LIBRARY} ${CGL_LIBRARY}
    ${OSICLP_LIBRARY} ${CLP_LIBRARY} ${OSI_LIBRARY} ${COINUTILS_LIBRARY})
  message(STATUS "CBC found: the cbc solver backend is built")
else()
  set(SATURN_HAVE_CBC FALSE)
  message(STATUS "CBC not found: only the GLPK solver backend is built")
endif()

find_package(OpenMP REQUIRED COMPONENTS CXX)

# OpenBLAS, OpenMP flavour: its threads and our OpenMP loops share one pool instead of
# oversubscribing the cores. Debian installs flavours side by side; prefer the OpenMP one.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-openmp openblas openblas-pthread
  PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
find_library(OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT OPENBLAS_LIBRARY)
  find_library(OPENBLAS_LIBRARY openblas REQUIRED)
  message(WARNING "OpenMP-flavoured OpenBLAS not found; using ${OPENBLAS_LIBRARY} "
                  "(apt-get install libopenblas-openmp-dev for best performance)")
endif()
get_filename_component(OPENBLAS_LIBRARY_DIR ${OPENBLAS_LIBRARY} DIRECTORY)
add_library(saturn_blas INTERFACE)
target_include_directories(saturn_blas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(saturn_blas INTERFACE ${OPENBLAS_LIBRARY} OpenMP::OpenMP_CXX)
# Debian's libopenblas.so.0 symlink is an alternative that may point at the pthread flavour:
# an rpath pins the flavour we linked against.
set(CMAKE_BUILD_RPATH ${OPENBLAS_LIBRARY_DIR})
set(CMAKE_INSTALL_RPATH ${OPENBLAS_LIBRARY_DIR})
message(STATUS "BLAS: ${OPENBLAS_LIBRARY}")

find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
if(SATURN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SATURN_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA: compiled whenever nvcc exists; nothing needs a GPU at run time.
set(SATURN_HAVE_CUDA FALSE)
if(NOT SATURN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(SATURN_HAVE_CUDA TRUE)
    message(STATUS "CUDA backend: ON (${CMAKE_CUDA_COMPILER}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(SATURN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SATURN_CUDA=ON but no CUDA compiler was found (set CUDACXX or PATH)")
  else()
    message(STATUS "CUDA backend: OFF (no nvcc found)")
  endif()
endif()
