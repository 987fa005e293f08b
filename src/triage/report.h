// Renders a triage Result as text (for a person on call) or JSON (schema "arfuse.triage.v1",
// documented in docs/triage.md).
#pragma once

#include <iosfwd>

#include "analyzer.h"

namespace arfuse {
namespace triage {

struct ReportOptions {
  int contextLines = 0;
  int maxEchoes = 12;
  int maxTimeline = 16;
};

void writeText(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out);
void writeJson(const Analyzer& a, const Result& r, const ReportOptions& o, std::ostream& out);
int exitCodeOf(const Result& r);

}  // namespace triage
}  // namespace arfuse
