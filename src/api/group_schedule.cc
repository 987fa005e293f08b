#include "api/group_schedule.h"

#include <map>
#include <utility>

namespace arfuse {

std::vector<GroupStep> scheduleGroup(const std::vector<GroupItem>& items) {
  // Per stream, how many all-reduces it has so far: an item's all-reduce goes into that wave, and
  // its launches into the segment before the next one.
  std::map<std::pair<int, uintptr_t>, int> reduces;
  std::vector<int> wave(items.size(), -1), segment(items.size(), 0);
  int waves = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    int& n = reduces[{items[i].device, items[i].stream}];
    if (items[i].allReduce) {
      wave[i] = n++;
      if (n > waves) waves = n;
    }
    segment[i] = n;
  }
  std::vector<GroupStep> steps;
  for (int s = 0; s <= waves; ++s) {
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].launch && segment[i] == s) steps.push_back({GroupStepKind::kLaunch, static_cast<int>(i)});
    if (s == waves) break;
    steps.push_back({GroupStepKind::kNcclGroupStart, -1});
    for (size_t i = 0; i < items.size(); ++i)
      if (wave[i] == s) steps.push_back({GroupStepKind::kAllReduce, static_cast<int>(i)});
    steps.push_back({GroupStepKind::kNcclGroupEnd, -1});
  }
  return steps;
}

std::string describeSchedule(const std::vector<GroupStep>& steps) {
  std::string out;
  for (const GroupStep& s : steps) {
    if (!out.empty()) out += ' ';
    switch (s.kind) {
      case GroupStepKind::kLaunch:
        out += "L" + std::to_string(s.item);
        break;
      case GroupStepKind::kAllReduce:
        out += "A" + std::to_string(s.item);
        break;
      case GroupStepKind::kNcclGroupStart:
        out += "[";
        break;
      case GroupStepKind::kNcclGroupEnd:
        out += "]";
        break;
    }
  }
  return out;
}

}  // namespace arfuse
