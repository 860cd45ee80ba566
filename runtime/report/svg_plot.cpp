#include "runtime/report/svg_plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "dsl/error.h"
#include "runtime/report/metrics.h"
#include "runtime/report/smoothing.h"

namespace towerjit::report {
namespace {

// Tableau's ten colours: distinct for the usual colour blindnesses and in greyscale print.
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr double kLeft = 72, kTop = 40, kPlotW = 560, kPlotH = 320, kBottom = 56;
constexpr size_t kDotsUpTo = 50;

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

bool finite(const std::pair<double, double>& p) { return std::isfinite(p.first) && std::isfinite(p.second); }

// An axis from `lo` to `hi` in steps of 1, 2 or 5 times a power of ten, about five of them
// (Heckbert's "nice numbers"), covering the data.
struct Axis {
  double lo, hi, step;
  double at(double v, double from, double to) const { return from + (v - lo) / (hi - lo) * (to - from); }
  // Enough decimals to tell the ticks apart, and no more.
  std::string label(double v) const {
    if (std::abs(v) < step * 1e-6) v = 0;  // not "-0" or "1e-17"
    if (std::abs(v) >= 1e7 || step < 1e-6) return fmt("%g", v);
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
  }
};

// `whole`: the values are whole numbers (steps, epochs), so ticks between them would mislead.
Axis nice_axis(double min, double max, bool whole = false) {
  if (!(min < max)) {  // one value (or no data): centre it in a small range
    const double pad = min == 0 ? 1 : std::abs(min) * 0.1;
    min -= pad, max += pad;
  }
  const double raw = (max - min) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  if (whole) step = std::max(step, 1.0);
  return {std::floor(min / step) * step, std::ceil(max / step) * step, step};
}

// Gridlines, tick labels and the axis titles.
void draw_axes(std::string& svg, const Axis& x, const Axis& y, const std::string& x_label,
               const std::string& y_label) {
  const double right = kLeft + kPlotW, bottom = kTop + kPlotH;
  svg += "<g stroke=\"#e0e0e0\">\n";
  std::string labels;
  for (int i = 0; x.lo + i * x.step <= x.hi + x.step * 1e-9; ++i) {
    const double v = x.lo + i * x.step, px = x.at(v, kLeft, right);
    svg += "<line x1=\"" + fmt("%.1f", px) + "\" y1=\"" + fmt("%.1f", kTop) + "\" x2=\"" + fmt("%.1f", px) +
           "\" y2=\"" + fmt("%.1f", bottom) + "\"/>\n";
    labels += "<text x=\"" + fmt("%.1f", px) + "\" y=\"" + fmt("%.1f", bottom + 16) +
              "\" text-anchor=\"middle\">" + x.label(v) + "</text>\n";
  }
  for (int i = 0; y.lo + i * y.step <= y.hi + y.step * 1e-9; ++i) {
    const double v = y.lo + i * y.step, py = y.at(v, bottom, kTop);
    svg += "<line x1=\"" + fmt("%.1f", kLeft) + "\" y1=\"" + fmt("%.1f", py) + "\" x2=\"" + fmt("%.1f", right) +
           "\" y2=\"" + fmt("%.1f", py) + "\"/>\n";
    labels += "<text x=\"" + fmt("%.1f", kLeft - 6) + "\" y=\"" + fmt("%.1f", py + 4) + "\" text-anchor=\"end\">" +
              y.label(v) + "</text>\n";
  }
  svg += "</g>\n" + labels;
  svg += "<rect x=\"" + fmt("%.1f", kLeft) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" + fmt("%.1f", kPlotW) +
         "\" height=\"" + fmt("%.1f", kPlotH) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + fmt("%.1f", kLeft + kPlotW / 2) + "\" y=\"" + fmt("%.1f", bottom + 40) +
         "\" text-anchor=\"middle\">" + escape_xml(x_label) + "</text>\n";
  svg += "<text transform=\"translate(18," + fmt("%.1f", kTop + kPlotH / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape_xml(y_label) + "</text>\n";
}

// One series: its line, its dots when few, its legend entry (slot `legend`, none when faint).
void draw_series(std::string& svg, const Series& s, size_t index, size_t legend, const Axis& x, const Axis& y) {
  const char* colour = kColours[(s.colour >= 0 ? static_cast<size_t>(s.colour) : index) % std::size(kColours)];
  std::string d, dots;
  size_t drawn = 0;
  for (const auto& p : s.points) {
    if (!finite(p)) continue;
    const std::string px = fmt("%.1f", x.at(p.first, kLeft, kLeft + kPlotW));
    const std::string py = fmt("%.1f", y.at(p.second, kTop + kPlotH, kTop));
    d += (drawn++ == 0 ? "M" : " L") + px + " " + py;
    dots += "<circle cx=\"" + px + "\" cy=\"" + py + "\" r=\"2.5\"/>";
  }
  const std::string style = s.faint    ? "\" stroke-width=\"1\" stroke-opacity=\"0.3\""
                            : s.dashed ? "\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\""
                                       : "\" stroke-width=\"1.5\"";
  if (drawn > 0)
    svg += "<path data-series=\"" + escape_xml(s.name) + "\" d=\"" + d + "\" fill=\"none\" stroke=\"" + colour +
           style + " stroke-linejoin=\"round\"/>\n";
  if (s.faint) return;
  if (drawn > 0 && drawn <= kDotsUpTo) svg += std::string("<g fill=\"") + colour + "\">" + dots + "</g>\n";
  const double ly = kTop + 8 + 20 * static_cast<double>(legend), lx = kLeft + kPlotW + 16;
  svg += "<line x1=\"" + fmt("%.1f", lx) + "\" y1=\"" + fmt("%.1f", ly) + "\" x2=\"" + fmt("%.1f", lx + 20) +
         "\" y2=\"" + fmt("%.1f", ly) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" +
         (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>\n";
  svg += "<text x=\"" + fmt("%.1f", lx + 26) + "\" y=\"" + fmt("%.1f", ly + 4) + "\">" + escape_xml(s.name) +
         (drawn == 0 ? " (no data)" : "") + "</text>\n";
}

// Markers as light dashed vertical lines, each labelled at its top, under the series; one
// outside the axis (an epoch end before the first evaluation plotted) is left out.
void draw_markers(std::string& svg, const std::vector<Marker>& markers, const Axis& x) {
  for (const Marker& m : markers) {
    if (!std::isfinite(m.x) || m.x < x.lo || m.x > x.hi) continue;
    const std::string px = fmt("%.1f", x.at(m.x, kLeft, kLeft + kPlotW));
    svg += "<line class=\"marker\" x1=\"" + px + "\" y1=\"" + fmt("%.1f", kTop) + "\" x2=\"" + px + "\" y2=\"" +
           fmt("%.1f", kTop + kPlotH) + "\" stroke=\"#bbb\" stroke-dasharray=\"3 3\"/>\n";
    svg += "<text x=\"" + px + "\" y=\"" + fmt("%.1f", kTop + 12) +
           "\" text-anchor=\"end\" dx=\"-3\" fill=\"#888\" font-size=\"10\">" + escape_xml(m.label) + "</text>\n";
  }
}

void write_text(const std::string& path, const std::string& text, Loc loc) {
  std::FILE* f = open_report_file(path, "plot", loc);
  errno = 0;
  const bool wrote = std::fputs(text.c_str(), f) >= 0;
  const bool closed = std::fclose(f) == 0;
  const int err = errno;
  user_check(wrote && closed, loc) << "cannot write the plot \"" << path << "\": "
                                   << (err != 0 ? std::strerror(err) : "write failed") << "; is the disk full?";
}

}  // namespace

std::string svg_plot(const std::string& title, const std::string& x_label, const std::string& y_label,
                     const std::vector<Series>& series, const std::vector<Marker>& markers) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double x_min = inf, x_max = -inf, y_min = inf, y_max = -inf;
  size_t longest_name = 0;
  bool whole_x = true;
  for (const auto& s : series) {
    const bool drawable = std::any_of(s.points.begin(), s.points.end(), finite);
    if (!s.faint) longest_name = std::max(longest_name, s.name.size() + (drawable ? 0 : 10));  // " (no data)"
    for (const auto& p : s.points) {
      if (!finite(p)) continue;
      x_min = std::min(x_min, p.first), x_max = std::max(x_max, p.first);
      whole_x = whole_x && p.first == std::round(p.first);
      y_min = std::min(y_min, p.second), y_max = std::max(y_max, p.second);
    }
  }
  const bool empty = x_min > x_max;
  const Axis x = empty ? nice_axis(0, 1) : nice_axis(x_min, x_max, whole_x);
  const Axis y = empty ? nice_axis(0, 1) : nice_axis(y_min, y_max);
  // The legend sits right of the plot, where it never hides a line; about 7 px a character.
  const double width = kLeft + kPlotW + 16 + (series.empty() ? 0 : 30 + 7 * static_cast<double>(longest_name));
  const double height = kTop + kPlotH + kBottom;

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", width) + "\" height=\"" +
                    fmt("%.0f", height) + "\" viewBox=\"0 0 " + fmt("%.0f", width) + " " + fmt("%.0f", height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt("%.1f", kLeft + kPlotW / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         escape_xml(title) + "</text>\n";
  draw_axes(svg, x, y, x_label, y_label);
  draw_markers(svg, markers, x);
  for (size_t i = 0, legend = 0; i < series.size(); ++i) {
    draw_series(svg, series[i], i, legend, x, y);
    legend += series[i].faint ? 0 : 1;
  }
  if (empty)
    svg += "<text x=\"" + fmt("%.1f", kLeft + kPlotW / 2) + "\" y=\"" + fmt("%.1f", kTop + kPlotH / 2) +
           "\" text-anchor=\"middle\" fill=\"#888\" font-size=\"16\">no data</text>\n";
  return svg + "</svg>\n";
}

void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series, const std::vector<Marker>& markers,
                    Loc loc) {
  write_text(path, svg_plot(title, x_label, y_label, series, markers), loc);
}

std::vector<Marker> epoch_markers(const MetricsLog& log) {
  std::map<int64_t, int64_t> last_step;  // epoch -> the largest step recorded in it
  auto note = [&](int64_t epoch, int64_t step) {
    auto [it, fresh] = last_step.emplace(epoch, step);
    if (!fresh) it->second = std::max(it->second, step);
  };
  for (const auto& r : log.steps) note(r.epoch, r.step);
  for (const auto& r : log.evals) note(r.epoch, r.step);
  std::vector<Marker> markers;
  for (auto it = last_step.begin(); it != last_step.end() && std::next(it) != last_step.end(); ++it)
    markers.push_back({static_cast<double>(it->second), "epoch " + std::to_string(it->first)});
  return markers;
}

std::vector<std::string> write_runs_plots(const std::vector<Run>& runs, const std::string& stem,
                                          const std::string& title, const PlotOptions& options, Loc loc) {
  const bool several = runs.size() > 1;
  std::vector<Series> loss, accuracy;
  for (size_t i = 0; i < runs.size(); ++i) {
    const MetricsLog& log = runs[i].log;
    const std::string prefix = several ? runs[i].name + ": " : "";
    const int train_colour = static_cast<int>(i), test_colour = several ? static_cast<int>(i) : 1;
    std::vector<double> steps, losses;
    for (const auto& r : log.steps) steps.push_back(static_cast<double>(r.step)), losses.push_back(r.loss);
    const std::vector<double> smoothed = smooth_ema(losses, options.smoothing);
    Series raw{prefix + "train loss (raw)", {}, train_colour, true};
    Series smooth{prefix + "train loss" + (options.smoothing > 0 ? " (smoothed " + fmt("%g", options.smoothing) + ")" : ""),
                  {}, train_colour};
    for (size_t k = 0; k < steps.size(); ++k) {
      raw.points.emplace_back(steps[k], losses[k]);
      smooth.points.emplace_back(steps[k], smoothed[k]);
    }
    Series test{prefix + "test loss", {}, test_colour, false, several};
    Series acc{prefix + "test accuracy", {}, test_colour};
    for (const auto& r : log.evals) {
      test.points.emplace_back(static_cast<double>(r.step), r.test_loss);
      acc.points.emplace_back(static_cast<double>(r.step), r.test_accuracy);
    }
    if (options.smoothing > 0) loss.push_back(std::move(raw));
    loss.push_back(std::move(smooth));
    loss.push_back(std::move(test));
    accuracy.push_back(std::move(acc));
  }
  const std::vector<Marker> markers = runs.empty() ? std::vector<Marker>{} : epoch_markers(runs[0].log);
  const std::vector<std::string> paths = {stem + "-loss.svg", stem + "-accuracy.svg"};
  write_svg_plot(paths[0], "Loss (" + title + ")", "step", "loss", loss, markers, loc);
  write_svg_plot(paths[1], "Test accuracy (" + title + ")", "step", "accuracy", accuracy, markers, loc);
  return paths;
}

std::vector<std::string> write_metrics_plots(const std::string& metrics_path, const PlotOptions& options, Loc loc) {
  const std::filesystem::path p(metrics_path);
  return write_runs_plots({{p.filename().string(), read_metrics(metrics_path, loc)}},
                          (p.parent_path() / p.stem()).string(), p.filename().string(), options, loc);
}

}  // namespace towerjit::report
