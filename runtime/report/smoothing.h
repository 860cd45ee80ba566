// The smoothing TensorBoard's scalar dashboard applies to a curve (its "Smoothing" slider), so
// our plots and TensorBoard show the same smoothed line for the same weight.
#pragma once

#include <vector>

namespace towerjit::report {

// TensorBoard's default slider position.
inline constexpr double kDefaultSmoothing = 0.6;

// The debiased exponential moving average of `values` with weight `w` in [0, 1) (0: no
// smoothing). TensorBoard's formula (classicSmoothing in
// tensorboard/webapp/widgets/line_chart_v2/data_transformer.ts; resmoothDataset in the older
// components/vz_line_chart2/line-chart.ts): with last_0 = 0 and n counting the finite values so far,
//
//   last_n = w * last_{n-1} + (1 - w) * y_n
//   s_n    = last_n / (1 - w^n)        (the debias: the EMA started at 0 would sit low)
//
// A non-finite value (a diverged loss) is passed through unsmoothed and leaves the average as
// it was, as TensorBoard does; so does a curve whose values are all equal.
std::vector<double> smooth_ema(const std::vector<double>& values, double w = kDefaultSmoothing);

}  // namespace towerjit::report
