# FindPCRE2
# ---------
# Finds the 8-bit library of PCRE2 (https://www.pcre.org), which the dsv32 tokenizer uses as its
# regex engine. Tries pkg-config (`libpcre2-8`) first, then a plain search for pcre2.h and the
# library, so it also works without pkg-config.
#
# Imported target:
#   PCRE2::pcre2-8       the 8-bit library (libpcre2-8), with its include directory
#
# Result variables:
#   PCRE2_FOUND, PCRE2_VERSION, PCRE2_INCLUDE_DIR, PCRE2_8_LIBRARY
#
# Honours find_package(PCRE2 <version>) and PCRE2_ROOT.

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_PCRE2_8 QUIET libpcre2-8)
endif()

find_path(PCRE2_INCLUDE_DIR NAMES pcre2.h HINTS ${PC_PCRE2_8_INCLUDEDIR} ${PC_PCRE2_8_INCLUDE_DIRS})
find_library(PCRE2_8_LIBRARY NAMES pcre2-8 libpcre2-8 pcre2-8-static
             HINTS ${PC_PCRE2_8_LIBDIR} ${PC_PCRE2_8_LIBRARY_DIRS})

if(PCRE2_INCLUDE_DIR AND EXISTS "${PCRE2_INCLUDE_DIR}/pcre2.h")
  file(STRINGS "${PCRE2_INCLUDE_DIR}/pcre2.h" _pcre2_major REGEX "^#define PCRE2_MAJOR[ \t]+[0-9]+")
  file(STRINGS "${PCRE2_INCLUDE_DIR}/pcre2.h" _pcre2_minor REGEX "^#define PCRE2_MINOR[ \t]+[0-9]+")
  string(REGEX REPLACE ".*PCRE2_MAJOR[ \t]+([0-9]+).*" "\\1" _pcre2_major "${_pcre2_major}")
  string(REGEX REPLACE ".*PCRE2_MINOR[ \t]+([0-9]+).*" "\\1" _pcre2_minor "${_pcre2_minor}")
  set(PCRE2_VERSION "${_pcre2_major}.${_pcre2_minor}")
  unset(_pcre2_major)
  unset(_pcre2_minor)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2
  REQUIRED_VARS PCRE2_8_LIBRARY PCRE2_INCLUDE_DIR
  VERSION_VAR PCRE2_VERSION)
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_8_LIBRARY)

if(PCRE2_FOUND AND NOT TARGET PCRE2::pcre2-8)
  add_library(PCRE2::pcre2-8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::pcre2-8 PROPERTIES
    IMPORTED_LOCATION "${PCRE2_8_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}")
  if(PCRE2_8_LIBRARY MATCHES "static")
    set_property(TARGET PCRE2::pcre2-8 APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS PCRE2_STATIC)
  endif()
endif()
