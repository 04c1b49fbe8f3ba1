# bpf_object(NAME SOURCE): compile SOURCE with clang -target bpf (CO-RE, against a vmlinux.h dumped from the
# running kernel's BTF), generate a libbpf skeleton with bpftool, and expose an INTERFACE target NAME_skel
# whose include directory holds NAME.skel.h. The pattern follows libbpf-bootstrap.
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

set(NETPRISM_BPF_GEN_DIR ${CMAKE_BINARY_DIR}/bpf-gen)
file(MAKE_DIRECTORY ${NETPRISM_BPF_GEN_DIR})

# The BTF source can be overridden to build for another kernel (e.g. in a packaging chroot).
set(NETPRISM_VMLINUX_BTF /sys/kernel/btf/vmlinux CACHE FILEPATH "kernel BTF used to generate vmlinux.h")
set(NETPRISM_VMLINUX_H ${NETPRISM_BPF_GEN_DIR}/vmlinux.h)
# Called once from the directory that calls bpf_object(): a custom command's output is only a file-level
# dependency inside the directory that defines it.
function(bpf_vmlinux_rule)
  add_custom_command(
    OUTPUT ${NETPRISM_VMLINUX_H}
    COMMAND ${BPFTOOL} btf dump file ${NETPRISM_VMLINUX_BTF} format c > ${NETPRISM_VMLINUX_H}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${NETPRISM_VMLINUX_H}.tmp ${NETPRISM_VMLINUX_H}
    COMMENT "Generating vmlinux.h from ${NETPRISM_VMLINUX_BTF}"
    VERBATIM)
  # One target owns the header; every skeleton target is ordered after it. Listing the file only as a DEPENDS
  # of several targets would let parallel make run the rule twice and race on the rename.
  add_custom_target(netprism_vmlinux_h DEPENDS ${NETPRISM_VMLINUX_H})
endfunction()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(NETPRISM_BPF_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(NETPRISM_BPF_ARCH arm64)
else()
  set(NETPRISM_BPF_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set_property(GLOBAL PROPERTY NETPRISM_BPF_OBJECTS "")

function(bpf_object name source)
  get_filename_component(src_abs ${source} ABSOLUTE)
  set(obj ${NETPRISM_BPF_GEN_DIR}/${name}.bpf.o)
  set(skel ${NETPRISM_BPF_GEN_DIR}/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${NETPRISM_BPF_ARCH} -Wall -Werror
            -I${NETPRISM_BPF_GEN_DIR} -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/bpf
            -c ${src_abs} -o ${obj}
    DEPENDS ${src_abs} ${NETPRISM_VMLINUX_H} ${ARGN}
    IMPLICIT_DEPENDS C ${src_abs}
    COMMENT "BPF ${name}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${obj}
    COMMENT "BPF skeleton ${name}"
    VERBATIM)
  add_custom_target(${name}_skel_gen DEPENDS ${skel} ${obj})
  add_dependencies(${name}_skel_gen netprism_vmlinux_h)
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  target_include_directories(${name}_skel INTERFACE ${NETPRISM_BPF_GEN_DIR})
  target_link_libraries(${name}_skel INTERFACE PkgConfig::LIBBPF)
  set_property(GLOBAL APPEND PROPERTY NETPRISM_BPF_OBJECTS ${obj})
endfunction()
