# SPDX-License-Identifier: MIT
# Finds the HDF5 C library for fitlib::io without the C language, in fitlib's build and in find_package(fitlib) alike.
include_guard(GLOBAL)

# fitlib_find_hdf5(): defines the imported target fitlib::hdf5_c (what fitlib::io links for HDF5's C library, however it
# was found; not an API of its own) in the calling directory, and sets in the caller's scope:
#   FITLIB_HDF5_FOUND         TRUE or FALSE
#   FITLIB_HDF5_HOW           how it was found, for a status line
#   FITLIB_HDF5_VERSION       its version, where known
#   FITLIB_HDF5_INCLUDE_DIRS  its headers and libraries, for a program built outside CMake (the fuzzer); the libraries
#   FITLIB_HDF5_LIBRARIES     may be a generator expression, which add_test expands
#   FITLIB_HDF5_MISSING       when not found: what to install
# Tried in order: HDF5's own CMake package (HDF5 built with CMake: conda-forge, Spack, vcpkg, Homebrew; HDF5_DIR points at
# one elsewhere), pkg-config's hdf5 (autotools builds; Debian's libhdf5-dev ships hdf5.pc and hdf5-serial.pc, no CMake
# package), and CMake's FindHDF5 last, only where the project enables C: it compiles a C probe, and in a C++-only project
# CMake stops the configure there.
function(fitlib_find_hdf5)
  foreach(_var HOW VERSION INCLUDE_DIRS LIBRARIES MISSING)
    set(FITLIB_HDF5_${_var} "" PARENT_SCOPE)
  endforeach()
  if(TARGET fitlib::hdf5_c)  # a second find_package(fitlib) in the same directory
    set(FITLIB_HDF5_FOUND TRUE PARENT_SCOPE)
    set(FITLIB_HDF5_HOW "found before" PARENT_SCOPE)
    return()
  endif()
  set(FITLIB_HDF5_FOUND FALSE PARENT_SCOPE)
  set(_link "")

  # 1. HDF5's CMake package. Its target names changed over releases: try them newest first, shared before static
  # unless HDF5_USE_STATIC_LIBRARIES (FindHDF5's switch) asks for static.
  find_package(HDF5 CONFIG QUIET)
  if(HDF5_FOUND)
    set(_candidates hdf5::hdf5-shared hdf5::hdf5-static hdf5::hdf5 hdf5-shared hdf5-static hdf5)
    if(HDF5_USE_STATIC_LIBRARIES)
      set(_candidates hdf5::hdf5-static hdf5::hdf5-shared hdf5::hdf5 hdf5-static hdf5-shared hdf5)
    endif()
    foreach(_target IN LISTS _candidates)
      if(TARGET ${_target})
        set(_link ${_target})
        get_target_property(_includes ${_target} INTERFACE_INCLUDE_DIRECTORIES)
        if(NOT _includes)
          set(_includes "")
        endif()
        set(FITLIB_HDF5_HOW "HDF5's CMake package in ${HDF5_DIR}, target ${_target}" PARENT_SCOPE)
        set(FITLIB_HDF5_VERSION "${HDF5_VERSION}" PARENT_SCOPE)
        set(FITLIB_HDF5_INCLUDE_DIRS "${_includes}" PARENT_SCOPE)
        set(FITLIB_HDF5_LIBRARIES "$<TARGET_FILE:${_target}>" PARENT_SCOPE)
        break()
      endif()
    endforeach()
  endif()

  # 2. pkg-config.
  set(_have_pkg_config FALSE)
  if(NOT _link)
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
      set(_have_pkg_config TRUE)
      pkg_search_module(FITLIB_PC_HDF5 QUIET IMPORTED_TARGET hdf5 hdf5-serial)
      if(FITLIB_PC_HDF5_FOUND AND TARGET PkgConfig::FITLIB_PC_HDF5)
        set(_link PkgConfig::FITLIB_PC_HDF5)
        set(FITLIB_HDF5_HOW "pkg-config, ${FITLIB_PC_HDF5_MODULE_NAME}" PARENT_SCOPE)
        set(FITLIB_HDF5_VERSION "${FITLIB_PC_HDF5_VERSION}" PARENT_SCOPE)
        set(FITLIB_HDF5_INCLUDE_DIRS "${FITLIB_PC_HDF5_INCLUDE_DIRS}" PARENT_SCOPE)
        set(FITLIB_HDF5_LIBRARIES "${FITLIB_PC_HDF5_LINK_LIBRARIES}" PARENT_SCOPE)
      endif()
    endif()
  endif()

  # 3. CMake's FindHDF5, where C is enabled.
  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT _link AND "C" IN_LIST _languages)
    find_package(HDF5 MODULE QUIET COMPONENTS C)
    if(HDF5_FOUND)
      if(TARGET HDF5::HDF5)
        set(_link HDF5::HDF5)
      else()  # FindHDF5 before CMake 3.19 made no target
        set(_link ${HDF5_C_LIBRARIES})
        set(_module_includes ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
      endif()
      set(FITLIB_HDF5_HOW "CMake's FindHDF5" PARENT_SCOPE)
      set(FITLIB_HDF5_VERSION "${HDF5_VERSION}" PARENT_SCOPE)
      set(FITLIB_HDF5_INCLUDE_DIRS "${HDF5_INCLUDE_DIRS}" PARENT_SCOPE)
      set(FITLIB_HDF5_LIBRARIES "${HDF5_C_LIBRARIES}" PARENT_SCOPE)
    endif()
  endif()

  if(NOT _link)
    string(CONCAT _missing "the HDF5 C library, found neither as HDF5's CMake package (HDF5_DIR) nor through pkg-config "
                  "(hdf5): install it (Debian/Ubuntu: libhdf5-dev; Fedora: hdf5-devel; Homebrew and conda-forge: hdf5)")
    if(NOT _have_pkg_config)
      string(APPEND _missing " and pkg-config, which finds it (Debian/Ubuntu: pkg-config; Fedora: pkgconf)")
    endif()
    string(APPEND _missing ", or point HDF5_DIR or PKG_CONFIG_PATH at the HDF5 you have")
    set(FITLIB_HDF5_MISSING "${_missing}" PARENT_SCOPE)
    return()
  endif()
  add_library(fitlib::hdf5_c INTERFACE IMPORTED)
  set_target_properties(fitlib::hdf5_c PROPERTIES INTERFACE_LINK_LIBRARIES "${_link}")
  if(_module_includes)
    list(REMOVE_DUPLICATES _module_includes)
    set_target_properties(fitlib::hdf5_c PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_module_includes}")
  endif()
  set(FITLIB_HDF5_FOUND TRUE PARENT_SCOPE)
endfunction()
