#include "ops/embedding/embedding.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(EmbeddingReference, GathersRowsForI32AndI64Ids) {
  const auto& k = kernel<EmbeddingKernel>("reference");
  Tensor w = randn({6, 5}, 1);
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor ids = ids_of({3, 0, 5, 3}, dt);
    Tensor out = Tensor::empty({4, 5}, DType::F32);
    k.forward(ExecContext::host(), ids, w, out);
    const int64_t expect[] = {3, 0, 5, 3};
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 5; ++j) ASSERT_EQ(out.data<float>()[n * 5 + j], w.data<float>()[expect[n] * 5 + j]);
  }
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const auto& k = kernel<EmbeddingKernel>("reference");
  Tensor w = randn({7, 3}, 2);
  Tensor ids = ids_of({4, 1, 4, 6, 4}, DType::I64);  // id 4 three times
  Tensor r = randn({5, 3}, 3);
  Tensor dw = Tensor::zeros({7, 3}, DType::F32);
  k.backward(ExecContext::host(), ids, r, dw);
  Tensor out = Tensor::empty({5, 3}, DType::F32);
  EXPECT_TRUE(fd_check(
      w, dw,
      [&] {
        k.forward(ExecContext::host(), ids, w, out);
        return dot(out, r);
      },
      1e-2, 1e-5));
  // Rows never looked up get no gradient; a second backward adds on top of the first.
  for (int j = 0; j < 3; ++j) EXPECT_EQ(dw.data<float>()[0 * 3 + j], 0.f);
  Tensor dw2 = dw.clone();
  k.backward(ExecContext::host(), ids, r, dw2);
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_NEAR(dw2.data<float>()[i], 2 * dw.data<float>()[i], 1e-6);
}

TEST(EmbeddingReference, OutOfRangeIdIsAnErrorAndWritesNothing) {
  const auto& k = kernel<EmbeddingKernel>("reference");
  Tensor w = randn({4, 2}, 4);
  for (int64_t bad : {int64_t(-1), int64_t(4), int64_t(-100)}) {
    Tensor ids = ids_of({1, bad}, DType::I32);
    Tensor out = Tensor::zeros({2, 2}, DType::F32);
    EXPECT_THROW(k.forward(ExecContext::host(), ids, w, out), Error);
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], 0.f);
    Tensor dw = Tensor::zeros({4, 2}, DType::F32);
    EXPECT_THROW(k.backward(ExecContext::host(), ids, out, dw), Error);
  }
  try {
    Tensor ids = ids_of({0, 9}, DType::I64);
    Tensor out = Tensor::zeros({2, 2}, DType::F32);
    k.forward(ExecContext::host(), ids, w, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 9 at position 1"), std::string::npos) << e.what();
  }
}

TEST(EmbeddingReference, ShapeAndDtypeErrors) {
  const auto& k = kernel<EmbeddingKernel>("reference");
  Tensor w = randn({4, 2}, 5);
  Tensor ids = ids_of({1, 2}, DType::I32);
  Tensor wrong = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), ids, w, wrong), Error);
  Tensor fids = Tensor::zeros({2}, DType::F32);
  Tensor out = Tensor::zeros({2, 2}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), fids, w, out), Error);
}
