#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/job_config.h"
#include "train/lr_schedule.h"

using namespace titan;

// Hand-computed from torchtitan's formulas (see lr_schedule.h):
// steps 10, warmup 2, decay_ratio unset -> decay 8, stable 10 + 1 - 2 - 8 = 1.
TEST(LrSchedule, WarmupStableDecayLinear) {
  LrSchedule s(1.0, 10, 2, std::nullopt, DecayType::Linear, 0.0);
  EXPECT_EQ(s.decay_steps(), 8);
  EXPECT_EQ(s.stable_steps(), 1);
  EXPECT_DOUBLE_EQ(s.lr_at_step(1), 0.5);    // (0 + 1) / 2
  EXPECT_DOUBLE_EQ(s.lr_at_step(2), 1.0);    // (1 + 1) / 2
  EXPECT_DOUBLE_EQ(s.lr_at_step(3), 1.0);    // stable (index 2 < 3)
  EXPECT_DOUBLE_EQ(s.lr_at_step(4), 0.875);  // p = (4 - 3) / 8
  EXPECT_DOUBLE_EQ(s.lr_at_step(10), 0.125); // p = (10 - 3) / 8: the last step is not 0
  EXPECT_DOUBLE_EQ(s.factor(10), 0.0);       // the virtual step after the end
}

TEST(LrSchedule, SqrtCosineAndMinFactor) {
  LrSchedule sq(2e-3, 10, 2, std::nullopt, DecayType::Sqrt, 0.0);
  EXPECT_NEAR(sq.lr_at_step(4), 2e-3 * (1 - std::sqrt(0.125)), 1e-15);  // 0.6464466 * lr
  EXPECT_NEAR(sq.factor(3), 0.64644660940672627, 1e-15);
  LrSchedule co(1.0, 10, 2, std::nullopt, DecayType::Cosine, 0.0);
  EXPECT_NEAR(co.lr_at_step(10), 0.038060233744356631, 1e-15);  // (1 + cos(0.875 pi)) / 2
  EXPECT_NEAR(co.lr_at_step(7), 0.5, 1e-15);                       // p = 0.5
  LrSchedule mn(1.0, 10, 2, std::nullopt, DecayType::Linear, 0.1);
  EXPECT_NEAR(mn.lr_at_step(10), 0.2125, 1e-15);  // 0.1 + 0.9 * 0.125
  EXPECT_DOUBLE_EQ(mn.lr_at_step(1), 0.5);        // warm-up ignores the floor
}

TEST(LrSchedule, DecayRatioRoundsHalfToEvenAndClamps) {
  // 10 * 0.25 = 2.5 -> round() = 2 (Python rounds half to even); stable = 11 - 2 - 2 = 7.
  LrSchedule a(1.0, 10, 2, 0.25, DecayType::Linear, 0.0);
  EXPECT_EQ(a.decay_steps(), 2);
  EXPECT_EQ(a.stable_steps(), 7);
  EXPECT_DOUBLE_EQ(a.lr_at_step(9), 1.0);
  EXPECT_DOUBLE_EQ(a.lr_at_step(10), 0.5);  // p = (10 - 9) / 2
  // 10 * 0.35 = 3.5 -> 4; stable = 5; decay starts at index 7.
  LrSchedule b(1.0, 10, 2, 0.35, DecayType::Linear, 0.0);
  EXPECT_EQ(b.decay_steps(), 4);
  EXPECT_DOUBLE_EQ(b.lr_at_step(7), 1.0);
  EXPECT_DOUBLE_EQ(b.lr_at_step(8), 0.75);
  EXPECT_DOUBLE_EQ(b.lr_at_step(10), 0.25);
  // warmup + decay > steps: decay is cut to steps - warmup.
  LrSchedule c(1.0, 10, 6, 0.9, DecayType::Linear, 0.0);
  EXPECT_EQ(c.decay_steps(), 4);
  EXPECT_EQ(c.stable_steps(), 1);
}

TEST(LrSchedule, EdgeCases) {
  // Warm-up longer than training: clamped to the steps, no decay.
  LrSchedule w(1.0, 3, 5, std::nullopt, DecayType::Linear, 0.0);
  EXPECT_EQ(w.warmup_steps(), 3);
  EXPECT_NEAR(w.lr_at_step(1), 1.0 / 3, 1e-15);
  EXPECT_NEAR(w.lr_at_step(2), 2.0 / 3, 1e-15);
  EXPECT_DOUBLE_EQ(w.lr_at_step(3), 1.0);
  EXPECT_DOUBLE_EQ(w.factor(100), 1.0);
  // No warm-up: the first step runs at full lr, then decays.
  LrSchedule z(1.0, 4, 0, std::nullopt, DecayType::Linear, 0.0);
  EXPECT_DOUBLE_EQ(z.lr_at_step(1), 1.0);
  EXPECT_DOUBLE_EQ(z.lr_at_step(2), 0.75);
  EXPECT_DOUBLE_EQ(z.lr_at_step(4), 0.25);
  EXPECT_DOUBLE_EQ(z.factor(50), 0.0);  // held past the end
  EXPECT_EQ(parse_decay_type("sqrt"), DecayType::Sqrt);
  EXPECT_THROW(parse_decay_type("exp"), Error);
}

TEST(LrSchedule, FromJobConfig) {
  JobConfig c;
  c.optimizer.lr = 2.0;
  c.training.steps = 10;
  c.lr_scheduler.warmup_steps = 2;
  c.lr_scheduler.decay_type = DecayType::Cosine;
  c.lr_scheduler.min_lr_factor = 0.5;
  LrSchedule s = make_lr_schedule(c);
  EXPECT_DOUBLE_EQ(s.lr_at_step(1), 1.0);
  EXPECT_NEAR(s.lr_at_step(10), 2.0 * (0.5 + 0.5 * 0.038060233744356631), 1e-14);
}
