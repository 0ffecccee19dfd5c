/// \file
/// \brief CPU: which instruction set the hot kernels run on, chosen at run time.
///
/// The build has no -march flags (nor do the programs that embed dsv32), so the kernels that matter
/// are compiled several times with GCC/Clang target attributes — AVX-512 (F, BW, DQ, VL; with
/// AVX512_BF16 where the CPU has it), AVX2 + FMA + F16C, and portable C++ — and one is picked per
/// call from what the CPU reports. Every path computes
/// the same operations in the same order, so every path gives bit-identical results; tests run
/// each path in turn (cpu::KernelOptions::max_isa, or a CpuFeatures of their own).
#pragma once

#include <cstdlib>
#include <string_view>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace dsv32::cpu {

/// \addtogroup backend
/// @{

/// \brief An instruction-set level of the CPU kernels, from the most portable up.
enum class Isa {
  portable = 0,  ///< plain C++ (any CPU, any compiler)
  avx2 = 1,      ///< x86-64 AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  avx512 = 2,    ///< x86-64 AVX-512 F + BW + DQ + VL (Skylake-SP, Ice Lake, Zen 4 and later)
  avx512_bf16 = 3,  ///< AVX-512 with AVX512_BF16 dot products (Cooper Lake, Sapphire Rapids, Zen 4 and later)
};

/// \brief The name of an ISA level, as the DSV32_CPU_ISA environment variable takes it.
constexpr std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "portable";
  }
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
/// Defined when the x86-64 kernels (target attributes) are compiled in.
#define DSV32_CPU_X86 1
// The kernels keep their tiles in arrays of vector registers indexed by fixed-count loops, which
// must be unrolled completely to stay in registers. GCC does that at -O3 (-fpeel-loops) but not at
// -O2, the level of CMake's RelWithDebInfo and of most distributions' builds: there the arrays
// went through memory and the kernels ran 2-3.7x slower (dsv32-bench-gemm, docs/performance.md).
// So the kernels ask for it themselves (clang unrolls such loops at -O2 and has no such attribute).
#if defined(__clang__)
#define DSV32_KERNEL_TARGET(isa) __attribute__((target(isa)))
#else
#define DSV32_KERNEL_TARGET(isa) __attribute__((target(isa), optimize("peel-loops")))
#endif
// Before a loop GCC must unroll completely where its own choice measured slower (it may instead
// interchange the loop with the one inside it, as in avx2::e4m3_row_blocks, where that sent the
// accumulators through memory); clang unrolls such loops by itself, and nvcc's front end does not
// know the pragma.
#if defined(__clang__) || defined(__CUDACC__)
#define DSV32_UNROLL_ALL
#else
#define DSV32_UNROLL_ALL _Pragma("GCC unroll 16")
#endif
#define DSV32_TARGET_AVX2 DSV32_KERNEL_TARGET("avx2,fma,f16c,bmi2")
#define DSV32_TARGET_AVX512 DSV32_KERNEL_TARGET("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi2")
#define DSV32_TARGET_AVX512_BF16 \
  DSV32_KERNEL_TARGET("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,f16c,bmi2")
#define DSV32_TARGET_AVX512_VBMI \
  DSV32_KERNEL_TARGET("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,avx2,fma,f16c,bmi2")
#define DSV32_TARGET_AVX512_BF16_VBMI \
  DSV32_KERNEL_TARGET("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vbmi,avx2,fma,f16c,bmi2")
#define DSV32_TARGET_AVX512_AMX \
  DSV32_KERNEL_TARGET("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,avx2,fma,f16c,bmi2,amx-tile,amx-int8")
#endif

/// \brief The best level this CPU (and this build) supports.
inline Isa detected_isa() noexcept {
#if defined(DSV32_CPU_X86)
  static const Isa isa = [] {
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
      // AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5
      const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
      return bf16 ? Isa::avx512_bf16 : Isa::avx512;
    }
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c"
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c && __builtin_cpu_supports("bmi2"))
      return Isa::avx2;
    return Isa::portable;
  }();
  return isa;
#else
  return Isa::portable;
#endif
}

/// \brief Whether the CPU has AVX512_VBMI (byte permutes: the fast small-M FP8 kernel's code
///        lookup). Where an AVX-512 CPU lacks it (Skylake-SP, Cascade Lake, Cooper Lake), that one
///        kernel runs the portable code (same results).
inline bool cpu_has_avx512_vbmi() noexcept {
#if defined(DSV32_CPU_X86)
  static const bool vbmi = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 1)) != 0;  // ECX bit 1
  }();
  return vbmi;
#else
  return false;
#endif
}

/// \brief Whether this CPU's f32 FMAs do the fast FP8 mode's (and the bf16 products') additions
///        faster than VDPBF16PS does: Intel's (Cooper Lake, Sapphire Rapids, Granite Rapids) issue the
///        512-bit instruction at a quarter of their FMA rate (measured on a Granite Rapids host: 1.7
///        against 6.7 G instructions/s per core, each VDPBF16PS doing 32 multiply-adds to an FMA's
///        16), AMD's Zen 4 at the FMA rate (twice the multiply-adds). Then the kernels that are
///        bound by those additions run them as FMAs (the same bits). DSV32_CPU_DOTS=fma or bf16 in
///        the environment overrides the vendor rule (A/B measurements).
inline bool cpu_prefers_fma_dots() noexcept {
#if defined(DSV32_CPU_X86)
  static const bool fma = [] {
    const char* env = std::getenv("DSV32_CPU_DOTS");
    const std::string_view v = env ? env : "";
    if (v == "fma") return true;
    if (v == "bf16") return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;  // "GenuineIntel"
  }();
  return fma;
#else
  return false;
#endif
}

/// \brief Whether the exact FP8 products may run on AMX-INT8 tiles (Sapphire Rapids, Granite Rapids):
///        the CPU has AMX-TILE and AMX-INT8, the OS enables their state (XCR0 bits 17 and 18), and
///        Linux grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once, at the
///        first call: from then on every thread of the process may use the tiles, as with oneDNN).
///        DSV32_CPU_AMX=0 in the environment says no without asking (A/B measurements). Used by the
///        avx512_bf16 table only; the tiles give the same bits as the other exact kernels.
inline bool cpu_has_amx_int8() noexcept {
#if defined(DSV32_CPU_X86) && defined(__linux__)
  static const bool amx = [] {
    const char* env = std::getenv("DSV32_CPU_AMX");
    if (env && std::string_view(env) == "0") return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // AMX-TILE and AMX-INT8: CPUID leaf 7, sub-leaf 0, EDX bits 24 and 25; OSXSAVE: leaf 1, ECX bit 27
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || (edx & (3u << 24)) != (3u << 24)) return false;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned long long xcr0 = static_cast<unsigned long long>(hi) << 32 | lo;
    if ((xcr0 & (3ull << 17)) != (3ull << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>, Linux 5.16+
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return amx;
#else
  return false;
#endif
}

/// \brief What the CPU kernels may use on a host: the ISA level and the features that choose
///        among the kernels of a level. A plain value: the kernel tables (simd::ops_for) and the
///        kernel plan (cpu/kernel_plan.hpp) are pure functions of it, so every feature set can be
///        planned and its table checked on any host (tests/backend/test_cpu_plan.cpp).
struct CpuFeatures {
  Isa isa = Isa::portable;  ///< the instruction-set level
  bool vbmi = false;        ///< AVX512_VBMI byte permutes (only with isa >= avx512)
  bool amx_int8 = false;    ///< AMX-INT8 tiles granted to this process (only with isa avx512_bf16 and vbmi)
  bool fma_dots = false;    ///< the FMAs outrun VDPBF16PS (cpu_prefers_fma_dots(); only with avx512_bf16)
  /// \brief Field by field.
  friend constexpr bool operator==(const CpuFeatures&, const CpuFeatures&) = default;
};

/// \brief `f` with its level capped at `cap` and every feature its level cannot have cleared (a
///        level above f's keeps f's).
constexpr CpuFeatures capped(CpuFeatures f, Isa cap) noexcept {
  if (cap < f.isa) f.isa = cap;
  if (f.isa < Isa::avx512) f.vbmi = false;
  if (f.isa < Isa::avx512_bf16) f.amx_int8 = false, f.fma_dots = false;
  if (!f.vbmi) f.amx_int8 = false;
  return f;
}

/// \brief How many distinct CpuFeatures capped() can give: feature_index() is below it.
inline constexpr int kCpuFeatureSets = 32;
/// \brief A distinct index below kCpuFeatureSets for each feature set (isa, vbmi, amx, fma_dots).
constexpr int feature_index(const CpuFeatures& f) noexcept {
  return static_cast<int>(f.isa) * 8 + (f.vbmi ? 4 : 0) + (f.amx_int8 ? 2 : 0) + (f.fma_dots ? 1 : 0);
}

/// \brief This host's features, probed once: detected_isa(), cpu_has_avx512_vbmi(),
///        cpu_has_amx_int8(), cpu_prefers_fma_dots(). The environment variable DSV32_CPU_ISA
///        (portable, avx2, avx512 or avx512_bf16), read at first use, caps the level for the whole
///        process: a documented override for tests and A/B measurements (as DSV32_CPU_DOTS and
///        DSV32_CPU_AMX are). A model's own cap is cpu::KernelOptions::max_isa.
inline CpuFeatures detected_features() noexcept {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    f.isa = detected_isa();
    f.vbmi = cpu_has_avx512_vbmi();
    f.fma_dots = cpu_prefers_fma_dots();
    const char* env = std::getenv("DSV32_CPU_ISA");
    const std::string_view v = env ? env : "";
    Isa cap = Isa::avx512_bf16;
    if (v == "portable") cap = Isa::portable;
    if (v == "avx2") cap = Isa::avx2;
    if (v == "avx512") cap = Isa::avx512;
    f = capped(f, cap);
    // asked only where the tiles could be used (the request changes the process's state)
    f.amx_int8 = f.isa == Isa::avx512_bf16 && f.vbmi && cpu_has_amx_int8();
    return f;
  }();
  return features;
}

/// @}

}  // namespace dsv32::cpu
