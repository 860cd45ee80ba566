// Line charts as self-contained SVG files (no scripts, fonts or styles from elsewhere), so a
// plot opens in any browser and can be attached to an issue: axes with round tick values, one
// coloured line per series, a legend, labelled vertical markers (epoch boundaries). Loss and
// accuracy are both plotted against the step, so evaluations made within an epoch sit where
// they were made.
#pragma once

#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "runtime/report/metrics.h"
#include "runtime/report/smoothing.h"

namespace towerjit {
using Loc = std::source_location;
}

namespace towerjit::report {

struct Series {
  std::string name;                               // the legend's text
  std::vector<std::pair<double, double>> points;  // (x, y); NaN or infinite points are skipped
  int colour = -1;       // index into the palette; -1: the series' position in the chart
  bool faint = false;    // light and thin, no dots, no legend entry: a raw curve under its smoothed one
  bool dashed = false;   // e.g. a run's test loss, in the colour of its train loss
};

// A light vertical line across the plot at `x`, with `label` at its top (an epoch's end).
struct Marker {
  double x = 0;
  std::string label;
};

// The SVG text of the chart. Each series is one <path> carrying data-series="<name>" (series
// with at most 50 points, faint ones aside, also get a dot per point, so a single point shows).
// No drawable point at all: an empty chart that says "no data". Never fails.
std::string svg_plot(const std::string& title, const std::string& x_label, const std::string& y_label,
                     const std::vector<Series>& series, const std::vector<Marker>& markers = {});

// Writes svg_plot(...) to `path`. Errors (towerjit::Error): the file cannot be written, named
// with the path, the system's reason and the fix.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<Series>& series,
                    const std::vector<Marker>& markers = {}, Loc loc = Loc::current());

struct PlotOptions {
  double smoothing = kDefaultSmoothing;  // the train loss's EMA weight (smooth_ema); 0: none
};

// One training run's metrics, named for the legend.
struct Run {
  std::string name;
  MetricsLog log;
};

// The end of each epoch but the last, as markers: the largest step any record of that epoch has
// (an evaluation after the epoch, else the last logged step).
std::vector<Marker> epoch_markers(const MetricsLog& log);

// Plots runs into "<stem>-loss.svg" and "<stem>-accuracy.svg", both against the step with the
// first run's epoch ends marked. Loss: each run's train loss smoothed by smooth_ema over the raw
// curve drawn faint, and its test loss at each evaluation. Accuracy: each evaluation's test
// accuracy at its step. One run: train loss in the first colour, test metrics in the second.
// Several: run i in colour i in both plots (test loss dashed). `title` ends each plot's title.
// Returns the two paths. Errors: a plot cannot be written.
std::vector<std::string> write_runs_plots(const std::vector<Run>& runs, const std::string& stem,
                                          const std::string& title, const PlotOptions& options = {},
                                          Loc loc = Loc::current());

// write_runs_plots for one metrics file (see metrics.h), next to it: "<dir>/<stem>-loss.svg" and
// "<dir>/<stem>-accuracy.svg". Errors: also the metrics file cannot be read or parsed.
std::vector<std::string> write_metrics_plots(const std::string& metrics_path, const PlotOptions& options = {},
                                             Loc loc = Loc::current());

}  // namespace towerjit::report
