# CMake package of the HCCL host toolkit, installed as PREFIX/lib64/cmake/hccl/hcclConfig.cmake
# and PREFIX/share/cmake/hccl/hcclConfig.cmake.
#
#   find_package(hccl CONFIG REQUIRED)        # with CMAKE_PREFIX_PATH=PREFIX
#   target_link_libraries(app PRIVATE hccl::hccl ascendcl::ascendcl)
#
# Imported targets:
#   hccl::hccl          PREFIX/lib64/libhccl.so, include directory PREFIX/include
#   ascendcl::ascendcl  PREFIX/lib64/libascendcl.so, the same include directory
# libhccl.so does not need libascendcl.so at link time; a program that calls aclrt* links both.
#
# Paths are found relative to this file, so an installed prefix may be moved. The libraries
# carry no SONAME, so CMake links them by name (-lhccl) and the program finds them at run time
# through its build rpath or LD_LIBRARY_PATH, as with a plain -l.

get_filename_component(_hccl_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
foreach(_hccl_lib IN ITEMS hccl ascendcl)
  if(NOT EXISTS "${_hccl_prefix}/lib64/lib${_hccl_lib}.so")
    set(hccl_FOUND FALSE)
    set(hccl_NOT_FOUND_MESSAGE "${_hccl_prefix}/lib64/lib${_hccl_lib}.so is missing")
    unset(_hccl_lib)
    unset(_hccl_prefix)
    return()
  endif()
  if(NOT TARGET ${_hccl_lib}::${_hccl_lib})
    add_library(${_hccl_lib}::${_hccl_lib} SHARED IMPORTED)
    set_target_properties(${_hccl_lib}::${_hccl_lib} PROPERTIES
      IMPORTED_LOCATION "${_hccl_prefix}/lib64/lib${_hccl_lib}.so"
      IMPORTED_NO_SONAME TRUE
      INTERFACE_INCLUDE_DIRECTORIES "${_hccl_prefix}/include")
  endif()
endforeach()
set(hccl_INCLUDE_DIRS "${_hccl_prefix}/include")
set(hccl_LIBRARIES hccl::hccl)
unset(_hccl_lib)
unset(_hccl_prefix)
