# The installable library: `cmake --install BUILD [--prefix DIR]` puts
#   lib/libhyperparallel.so.0.1.0, .so.0, .so   the shared library (SONAME libhyperparallel.so.0)
#   lib/libhyperparallel.a                      the static library (one prelinked object, see below)
#   lib/pkgconfig/hyperparallel.pc              pkg-config: Cflags, Libs, Requires.private, Libs.private
#   include/hp/*.h                              the public headers (hp/hp.h includes them all)
#   bin/hp                                      the command-line tool
# Both libraries hold the core (`hp`) and, when built, the MPI communicator (`hp_mpi`), so one
# -lhyperparallel serves single-rank and MPI programs (hp/comm_mpi.h).
#
# Operators and CPU kernels are found through tables, and the MPI communicator refers back into
# the core, so in-tree executables link `hp` whole (HP_LINK). An installed static library must work
# with a plain -lhyperparallel: its one archive member is every object prelinked with `ld -r`, so
# the first symbol a program uses brings in all of them (the same effect as --whole-archive).
include(GNUInstallDirs)

# The objects are also linked into a shared library.
set_target_properties(hp PROPERTIES POSITION_INDEPENDENT_CODE ON)
set(HP_INSTALL_PARTS hp)
if(HP_COMM_LIBS)
  set_target_properties(${HP_COMM_LIBS} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  list(APPEND HP_INSTALL_PARTS ${HP_COMM_LIBS})
endif()

set(HP_SO_STUB ${CMAKE_BINARY_DIR}/hyperparallel_so.c)
file(WRITE ${HP_SO_STUB} "/* libhyperparallel.so: every object of the core and communicator libraries, linked whole. */\n")
add_library(hyperparallel_shared SHARED ${HP_SO_STUB})
set_target_properties(hyperparallel_shared PROPERTIES OUTPUT_NAME hyperparallel VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR})
foreach(part ${HP_INSTALL_PARTS})
  target_link_libraries(hyperparallel_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${part}>")
endforeach()
target_link_options(hyperparallel_shared PRIVATE -Wl,--no-undefined)

set(HP_STATIC_OBJ ${CMAKE_BINARY_DIR}/hyperparallel_all.o)
set(HP_STATIC_LIB ${CMAKE_BINARY_DIR}/libhyperparallel.a)
set(HP_PART_FILES)
foreach(part ${HP_INSTALL_PARTS})
  list(APPEND HP_PART_FILES $<TARGET_FILE:${part}>)
endforeach()
add_custom_command(OUTPUT ${HP_STATIC_LIB}
  COMMAND ${CMAKE_COMMAND} -E rm -f ${HP_STATIC_LIB}
  COMMAND ${CMAKE_LINKER} -r -o ${HP_STATIC_OBJ} --whole-archive ${HP_PART_FILES} --no-whole-archive
  COMMAND ${CMAKE_AR} qc ${HP_STATIC_LIB} ${HP_STATIC_OBJ}
  COMMAND ${CMAKE_RANLIB} ${HP_STATIC_LIB}
  DEPENDS ${HP_INSTALL_PARTS}
  COMMENT "Prelinking libhyperparallel.a (one object: a plain -lhyperparallel brings in every operator)"
  VERBATIM)
add_custom_target(hyperparallel_static ALL DEPENDS ${HP_STATIC_LIB})

# pkg-config. The prefix is relative to the .pc file, so `cmake --install --prefix DIR` needs no
# reconfigure.
file(RELATIVE_PATH HP_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" HP_PC_PREFIX_REL "${HP_PC_PREFIX_REL}")
set(HP_PC_REQUIRES "openblas yaml-0.1 libcjson zlib")
set(HP_PC_CFLAGS "")
if(URING_FOUND)
  string(APPEND HP_PC_REQUIRES " liburing")
endif()
set(HP_PC_LIBS_PRIVATE "${OpenMP_C_FLAGS} -lm -lpthread")
if(HP_COMM_LIBS)
  pkg_check_modules(HP_PC_MPI QUIET mpi-c)
  if(HP_PC_MPI_FOUND)
    string(APPEND HP_PC_REQUIRES " mpi-c")
  else()
    foreach(lib ${MPI_C_LIBRARIES})
      string(APPEND HP_PC_LIBS_PRIVATE " ${lib}")
    endforeach()
  endif()
  # What the in-tree hp_mpi target tells its users: the MPI communicator is present.
  string(APPEND HP_PC_CFLAGS " -DHP_HAVE_MPI=1")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/hyperparallel.pc.in ${CMAKE_BINARY_DIR}/hyperparallel.pc @ONLY)

install(TARGETS hyperparallel_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${HP_STATIC_LIB} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/hp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/hyperparallel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET hp_cli)
  install(TARGETS hp_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
