# dlpx_add_kernel_library: a kernel library (include/dlpx/kernel.h, docs/kernels.md) as one
# SHARED target. Included by dlpxConfig.cmake (find_package(dlpx)) and by dlpx's own CMakeLists.
#
#   dlpx_add_kernel_library(<name> SOURCES <file>... [OUTPUT_NAME <base>]
#                           [LINK_LIBRARIES <item>...] [STUB <file.pyi>])
#
# What it sets up:
#   - a SHARED library lib<name>.so (or lib<OUTPUT_NAME>.so) linking dlpx::dlpx and nothing of
#     Python; C sources compile as C11, C++ as C++17, .cu as CUDA C++17 (CUDA must be enabled:
#     project(... CUDA) or enable_language(CUDA)) with the CUDA runtime linked statically, so the
#     library needs no libcudart at run time;
#   - hidden visibility, static libraries' symbols kept inside (--exclude-libs) and a version
#     script: the library exports kernel.h's `dlpx_kernel_library` alone;
#   - how it finds libdlpx.so.0 at run time: in a build tree, the build RPATH CMake writes (the
#     directory of the libdlpx it linked); installed, RUNPATH `$ORIGIN` and `$ORIGIN/../dlpx/lib`
#     (a package directory beside dlpx's in site-packages). From Python neither is needed:
#     dlpx.load_library runs after `import dlpx` has loaded libdlpx.so.0, and the dynamic linker
#     gives a library that needs that SONAME the copy already loaded, wherever dlpx is installed;
#   - STUB <file.pyi>: after each build, `python -m dlpx.stubgen` writes the library's stub there
#     (with ${Python_EXECUTABLE}, ${Python3_EXECUTABLE} or the Python3 CMake finds: one that
#     imports dlpx, as scikit-build-core's does). A relative path is in the build directory.
# LINK_LIBRARIES are linked PRIVATE; anything else (include directories, definitions, CUDA
# architectures) is the target's to set as usual.
include_guard(GLOBAL)

function(dlpx_add_kernel_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_NAME;STUB" "SOURCES;LINK_LIBRARIES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dlpx_add_kernel_library(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "dlpx_add_kernel_library(${name}): no SOURCES")
  endif()
  if(NOT TARGET dlpx::dlpx)
    message(FATAL_ERROR "dlpx_add_kernel_library(${name}): no dlpx::dlpx target (find_package(dlpx) first)")
  endif()
  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  foreach(_source IN LISTS arg_SOURCES)
    if(_source MATCHES "\\.cu$" AND NOT "CUDA" IN_LIST _languages)
      message(FATAL_ERROR "dlpx_add_kernel_library(${name}): ${_source} is CUDA, and the CUDA language is "
                          "not enabled (project(... LANGUAGES C CXX CUDA) or enable_language(CUDA) first)")
    endif()
  endforeach()

  add_library(${name} SHARED ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE dlpx::dlpx ${arg_LINK_LIBRARIES})
  set_target_properties(${name} PROPERTIES
    C_STANDARD 11 C_STANDARD_REQUIRED ON
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN;$ORIGIN/../dlpx/lib")
  if(arg_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME "${arg_OUTPUT_NAME}")
  endif()
  # A call of an undeclared function (`dlpx_call_retrun_int`) is C++'s error, and C's too (as
  # dlpx.cpp builds): a warning would leave an undefined symbol that only the load finds.
  target_compile_options(${name} PRIVATE
    "$<$<AND:$<COMPILE_LANGUAGE:C>,$<C_COMPILER_ID:GNU,Clang,AppleClang>>:-Werror=implicit-function-declaration>")
  if("CUDA" IN_LIST _languages)
    set_target_properties(${name} PROPERTIES
      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_VISIBILITY_PRESET hidden
      CUDA_RUNTIME_LIBRARY Static)
  endif()
  # The static CUDA runtime (and any static library linked in) stays private to the library, and
  # so do the std:: templates C++ code instantiates (libstdc++ gives namespace std default
  # visibility): a version script keeps dlpx_kernel_library the one export.
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    set(_exports "${CMAKE_CURRENT_BINARY_DIR}/${name}_exports.map")
    file(WRITE "${_exports}" "{ global: dlpx_kernel_library; local: *; };\n")
    # The script's path as one -Xlinker argument: a LINKER: (-Wl,) list splits at the commas a
    # build directory may hold.
    target_link_options(${name} PRIVATE "LINKER:--exclude-libs,ALL"
                        "SHELL:-Xlinker \"--version-script=${_exports}\"")
    set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${_exports}")
  endif()

  if(arg_STUB)
    if(DEFINED Python_EXECUTABLE)
      set(_python "${Python_EXECUTABLE}")
    elseif(DEFINED Python3_EXECUTABLE)
      set(_python "${Python3_EXECUTABLE}")
    else()
      find_package(Python3 COMPONENTS Interpreter REQUIRED)
      set(_python "${Python3_EXECUTABLE}")
    endif()
    get_filename_component(_stub "${arg_STUB}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
    get_filename_component(_stub_directory "${_stub}" DIRECTORY)
    file(MAKE_DIRECTORY "${_stub_directory}")
    add_custom_command(TARGET ${name} POST_BUILD
      COMMAND "${_python}" -m dlpx.stubgen "$<TARGET_FILE:${name}>" -o "${_stub}"
      COMMENT "python -m dlpx.stubgen: ${_stub}"
      VERBATIM)
  endif()
endfunction()
