// Static probes (USDT): named points in the code that perf, bpftrace and SystemTap can attach to, at no cost
// until they do. A probe is one `nop` in the code and an ELF note beside it (never loaded) naming the nop's
// address, the provider ("tensorpool"), the probe and where each argument is at that address; a tracer that
// attaches puts a breakpoint (a uprobe) on the nop and reads the arguments from there. No header of the
// system's is needed (<sys/sdt.h> is often not installed); the note is the one <sys/sdt.h> writes, version 3:
//
//   section .note.stapsdt, type SHT_NOTE, one note a probe: namesz 8, descsz, type 3, name "stapsdt\0", then
//   desc: the nop's address (8 bytes), the address of the section .stapsdt.base (8 bytes: a tool compares it
//   with the section's address to find how far the file was moved after linking), the semaphore's address (8
//   bytes, 0: none, the probe always runs its nop), then three strings: provider, probe name, arguments;
//   each part 4-byte aligned.
//   Arguments: space-separated, each `SIZE@OPERAND`: SIZE the bytes (negative: signed), OPERAND an AT&T
//   operand as the compiler wrote it (%rdi, 16(%rsp)).
//   .stapsdt.base: one byte in an allocated section, one for the whole link (a COMDAT group).
//
// Arguments are integers, enums or pointers, each of its own size, in a register or in memory ("rm": where
// the value already is; perf's parser takes registers and register-relative memory, not constants). A value
// the code has costs nothing; one computed only for a probe costs its computation every time, attached or
// not: pass values the code has. Every site of one probe passes arguments of the same types: the kernel
// puts several sites under one event only where they match (perf probe fails with EEXIST otherwise).
#pragma once

#include <cstdint>
#include <type_traits>

namespace tp::probes {
// An argument as the note describes it: an integer of its own size (an enum's underlying type, a pointer's
// address), so that a value in a register or in memory is named where it is, not widened into another.
template <typename T>
inline auto arg(T value) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<uintptr_t>(value);
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(value);
  } else {
    static_assert(std::is_integral_v<T>, "a probe's arguments are integers, enums or pointers");
    return value;
  }
}
// The note's SIZE, negated, as the template prints it (%n: the constant's negation, without `$`): the
// argument's bytes, negative where it is signed.
template <typename T>
constexpr int negatedSize() {
  using Arg = decltype(arg(T{}));
  return std::is_signed_v<Arg> ? static_cast<int>(sizeof(Arg)) : -static_cast<int>(sizeof(Arg));
}
}  // namespace tp::probes

#define TP_PROBE_STR2(x) #x
#define TP_PROBE_STR(x) TP_PROBE_STR2(x)

// The note and the nop; `args` the argument template, `...` the asm operands it names. `inline` (GCC >= 9):
// the inliner counts the statement as one instruction, not the ~20 lines of its template, so that a function
// that probes is inlined where it was before (countReleaseLocked, probed, was no longer inlined into
// releaseLocked: 13 instructions more a free).
#if defined(__clang__)
#define TP_PROBE_ASM_QUALIFIERS __volatile__
#else
#define TP_PROBE_ASM_QUALIFIERS __volatile__ __inline__
#endif
#define TP_PROBE_ASM(name, args, ...)                                                                     \
  __asm__ TP_PROBE_ASM_QUALIFIERS(                                                                       \
      "990: nop\n"                                                                                       \
      ".pushsection .note.stapsdt,\"?\",\"note\"\n"                                                      \
      ".balign 4\n"                                                                                      \
      ".4byte 992f-991f, 994f-993f, 3\n"                                                                 \
      "991: .asciz \"stapsdt\"\n"                                                                        \
      "992: .balign 4\n"                                                                                 \
      "993: .8byte 990b\n"                                                                               \
      ".8byte _.stapsdt.base\n"                                                                          \
      ".8byte 0\n"                                                                                       \
      ".asciz \"tensorpool\"\n"                                                                          \
      ".asciz \"" TP_PROBE_STR(name) "\"\n"                                                              \
      ".asciz \"" args "\"\n"                                                                            \
      "994: .balign 4\n"                                                                                 \
      ".popsection\n"                                                                                    \
      ".ifndef _.stapsdt.base\n"                                                                         \
      ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"                            \
      ".weak _.stapsdt.base\n"                                                                           \
      ".hidden _.stapsdt.base\n"                                                                         \
      "_.stapsdt.base: .space 1\n"                                                                       \
      ".size _.stapsdt.base, 1\n"                                                                        \
      ".popsection\n"                                                                                    \
      ".endif\n"                                                                                         \
      :                                                                                                  \
      : __VA_ARGS__)

#define TP_PROBE_OPERAND(n, x) \
  [s##n] "n"(::tp::probes::negatedSize<std::remove_cvref_t<decltype(x)>>()), [a##n] "rm"(::tp::probes::arg(x))

// TP_PROBEn(name, a1, ..., an): the probe `tensorpool:name` with n arguments (n = 0 to 5).
#define TP_PROBE0(name) TP_PROBE_ASM(name, "", )
#define TP_PROBE1(name, a1) TP_PROBE_ASM(name, "%n[s1]@%[a1]", TP_PROBE_OPERAND(1, a1))
#define TP_PROBE2(name, a1, a2) \
  TP_PROBE_ASM(name, "%n[s1]@%[a1] %n[s2]@%[a2]", TP_PROBE_OPERAND(1, a1), TP_PROBE_OPERAND(2, a2))
#define TP_PROBE3(name, a1, a2, a3)                                                                     \
  TP_PROBE_ASM(name, "%n[s1]@%[a1] %n[s2]@%[a2] %n[s3]@%[a3]", TP_PROBE_OPERAND(1, a1), TP_PROBE_OPERAND(2, a2), \
               TP_PROBE_OPERAND(3, a3))
#define TP_PROBE4(name, a1, a2, a3, a4)                                                                          \
  TP_PROBE_ASM(name, "%n[s1]@%[a1] %n[s2]@%[a2] %n[s3]@%[a3] %n[s4]@%[a4]", TP_PROBE_OPERAND(1, a1),                     \
               TP_PROBE_OPERAND(2, a2), TP_PROBE_OPERAND(3, a3), TP_PROBE_OPERAND(4, a4))
#define TP_PROBE5(name, a1, a2, a3, a4, a5)                                                                      \
  TP_PROBE_ASM(name, "%n[s1]@%[a1] %n[s2]@%[a2] %n[s3]@%[a3] %n[s4]@%[a4] %n[s5]@%[a5]", TP_PROBE_OPERAND(1, a1),        \
               TP_PROBE_OPERAND(2, a2), TP_PROBE_OPERAND(3, a3), TP_PROBE_OPERAND(4, a4), TP_PROBE_OPERAND(5, a5))
