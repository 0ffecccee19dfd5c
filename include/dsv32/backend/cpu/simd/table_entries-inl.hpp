/// \file
/// \brief CPU: the GemmOps entries every ISA table has. No include guard: gemm_portable.hpp,
///        gemm_avx2.hpp and gemm_avx512.hpp each include this file inside their namespace
///        (`portable`, `avx2`, `avx512`), so every name below is that ISA's kernel; the table functions
///        (portable_table, avx2_table, avx512_table) call common_entries() and add what only they have.

/// Sets the tile sizes and the entries every table holds from this namespace's kernels.
inline void common_entries(GemmOps& o) {
  o.nr = kNr;
  o.mr = kMr;
  o.nr64 = kNr64;
  o.mr64 = kMr64;
  o.pack_bf16 = pack_bf16;
  o.pack_f32 = pack_f32;
  o.pack_e4m3 = pack_e4m3;
  o.pack_e4m3_f64 = pack_e4m3_f64;
  o.micro_exact_products = micro_exact_products;
  o.micro_rounded_products = micro_rounded_products;
  o.micro_f64 = micro_f64;
  o.micro_f64_scaled = micro_f64_scaled;
  o.epilogue_f64 = epilogue_f64;
  o.epilogue_f32 = epilogue_f32;
  o.widen_bf16 = widen_bf16;
  o.widen_e4m3 = widen_e4m3;
  o.widen_e4m3_f64 = widen_e4m3_f64;
  o.amax_bf16 = amax_bf16;
  o.quantize_e4m3 = quantize_e4m3;
  o.dequant_e4m3 = dequant_e4m3;
  o.e4m3_rows = e4m3_rows;
  o.fp8_value_dots = fp8_value_dots;
  o.fp8_value_dots_scaled = fp8_value_dots_scaled;
}
