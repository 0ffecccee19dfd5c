/// \file
/// \brief CPU: the kernels written once for both x86 vector widths. No include guard: gemm_avx2.hpp
///        and gemm_avx512.hpp each include this file inside their namespace (`avx2`, `avx512`), after
///        the ISA's own kernels, so every unqualified name below is that ISA's, with
///        DSV32_TARGET_WIDTH defined as their target attribute (DSV32_TARGET_AVX2, DSV32_TARGET_AVX512):
///        each function and lambda here is compiled for that level, as the ISA's own kernels are.
///
/// What each includer provides (its vector width sets the numbers):
/// - `kMr`, `kNr`: the f32 micro-tile (6 x 16 on AVX2, 12 x 32 on AVX-512); `kMr64`: the f64 tile's
///   rows (6, 12; its columns are GemmOps::nr64);
/// - `pack_panel<Kind>(w, ldw, n, kc, out)`: kNr weight rows widened into a panel (Kind 0 bf16,
///   1 f32, 2 E4M3);
/// - `micro_any<kRounded, kPairSwap, kLda, kLdb>(mr, kc, a, lda, b, ldb, c, ldc, accumulate)`: the f32
///   micro-kernel over any row count;
/// - `micro_f64_tile<MR>(kc, a, lda, b, c, ldc)`: one f64 tile;
/// - `e4m3_scaled_cols_mt<MT>`, `e4m3_blocks<MT, R>` and `e4m3_weight_rows(mt)`: the latent kernel per
///   x-row count, the exact small-M FP8 block kernel and its weight rows per x-row group.
///
/// What the two files keep apart is what differs in more than the width: masked loads and stores
/// against scalar tails, two 256-bit halves against one 512-bit register, register plans, VBMI
/// lookups against F16C widening (docs/architecture.md, "Kernels").

#if defined(DSV32_CPU_X86)

// GemmOps::pack_bf16, pack_f32, pack_e4m3: kNr-row panels.
DSV32_TARGET_WIDTH inline void pack_bf16(const std::uint16_t* w, std::int64_t ldw, int n, int kc, float* out) {
  pack_panel<0>(w, ldw, n, kc, out);
}
DSV32_TARGET_WIDTH inline void pack_f32(const float* w, std::int64_t ldw, int n, int kc, float* out) {
  pack_panel<1>(w, ldw, n, kc, out);
}
DSV32_TARGET_WIDTH inline void pack_e4m3(const std::uint8_t* w, std::int64_t ldw, int n, int kc, float* out) {
  pack_panel<2>(w, ldw, n, kc, out);
}

// GemmOps::micro_exact_products, micro_rounded_products.
DSV32_TARGET_WIDTH inline void micro_exact_products(int mr, int kc, const float* a, std::int64_t lda, const float* b,
                                                    std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  micro_any<false>(mr, kc, a, lda, b, ldb, c, ldc, accumulate);
}
DSV32_TARGET_WIDTH inline void micro_rounded_products(int mr, int kc, const float* a, std::int64_t lda, const float* b,
                                                      std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  micro_any<true>(mr, kc, a, lda, b, ldb, c, ldc, accumulate);
}

/// GemmOps::fp8_value_dots: the panel order on FMAs, kMr x kNr tiles (the drivers' x tiles are 128
/// values a row: that stride compiled in).
DSV32_TARGET_WIDTH inline void fp8_value_dots(int mr, const float* a, std::int64_t lda, const float* b, float* dot,
                                              std::int64_t ldd) {
  if (lda == 128) micro_any<false, true, 128, kNr>(mr, 128, a, lda, b, kNr, dot, ldd, false);
  else micro_any<false, true>(mr, 128, a, lda, b, kNr, dot, ldd, false);
}

/// GemmOps::micro_f64: f64 tiles of kMr64 rows, then 8, 4, 2, 1.
DSV32_TARGET_WIDTH inline void micro_f64(int mr, int kc, const double* a, std::int64_t lda, const double* b, double* c,
                                         std::int64_t ldc) {
  for_row_tiles<kMr64>(mr, [&](auto rows, int i) DSV32_TARGET_WIDTH {
    micro_f64_tile<decltype(rows)::value>(kc, a + i * lda, lda, b, c + i * ldc, ldc);
  });
}

/// GemmOps::e4m3_scaled_cols: the kernel compiled for M x rows (1-8).
DSV32_TARGET_WIDTH inline void e4m3_scaled_cols(int M, std::int64_t D, std::int64_t N, const float* x,
                                                const std::uint8_t* w, std::int64_t ldw, const float* scale,
                                                float* out, std::int64_t ldo, const std::uint8_t* next) {
  using Kernel = void (*)(std::int64_t, std::int64_t, const float*, const std::uint8_t*, std::int64_t, const float*,
                          float*, std::int64_t, const std::uint8_t*);
  static constexpr Kernel kernels[8] = {e4m3_scaled_cols_mt<1>, e4m3_scaled_cols_mt<2>, e4m3_scaled_cols_mt<3>,
                                        e4m3_scaled_cols_mt<4>, e4m3_scaled_cols_mt<5>, e4m3_scaled_cols_mt<6>,
                                        e4m3_scaled_cols_mt<7>, e4m3_scaled_cols_mt<8>};
  kernels[M - 1](D, N, x, w, ldw, scale, out, ldo, next);
}

/// The ISA's block kernel for the shared loops of e4m3_rows (E4m3RowsDriver, rows_driver.hpp; each
/// includer defines e4m3_rows on it: the AVX2 one takes a single x row its own way).
struct E4m3RowsKernel {
  template <int MT, int R>
  DSV32_TARGET_WIDTH static void blocks(std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx,
                                        const float* xs, std::int64_t ldxs, const std::uint8_t* const* wr,
                                        const float* ws, int valid_rows, float* out, std::int64_t ldo,
                                        std::int64_t ahead) {
    e4m3_blocks<MT, R>(kb0, kb1, xd, ldx, xs, ldxs, wr, ws, valid_rows, out, ldo, ahead);
  }
  static constexpr int weight_rows(int mt) { return e4m3_weight_rows(mt); }
};

#endif  // DSV32_CPU_X86
