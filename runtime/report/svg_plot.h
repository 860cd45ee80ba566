// Line charts as self-contained SVG files (no scripts, fonts or styles from elsewhere), so a
// plot opens in any browser and can be attached to an issue: axes with round tick values, one
// coloured line per series, a legend. Loss against step, accuracy against epoch.
#pragma once

#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace towerjit {
using Loc = std::source_location;
}

namespace towerjit::report {

struct Series {
  std::string name;                               // the legend's text
  std::vector<std::pair<double, double>> points;  // (x, y); NaN or infinite points are skipped
};

// The SVG text of the chart. Each series is one <path> (series with at most 50 points also get
// a dot per point, so a single point shows). No drawable point at all: an empty chart that says
// "no data". Never fails.
std::string svg_plot(const std::string& title, const std::string& x_label, const std::string& y_label,
                     const std::vector<Series>& series);

// Writes svg_plot(...) to `path`. Errors (towerjit::Error): the file cannot be written, named
// with the path, the system's reason and the fix.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series, Loc loc = Loc::current());

// Plots a metrics file (see metrics.h) next to it: "<dir>/<stem>-loss.svg" (train loss by step,
// and test loss at each evaluation) and "<dir>/<stem>-accuracy.svg" (test accuracy by epoch).
// Returns the two paths. Errors: the metrics file cannot be read or parsed, a plot cannot be
// written.
std::vector<std::string> write_metrics_plots(const std::string& metrics_path, Loc loc = Loc::current());

}  // namespace towerjit::report
