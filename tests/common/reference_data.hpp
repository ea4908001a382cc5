// SPDX-License-Identifier: MIT
// Loads the recorded reference data under tests/data/ (SciPy iterates, subproblem cases).
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fitlib::test {

/// The JSON file `tests/data/<relative>`.
inline nlohmann::json load_reference(const std::string& relative) {
  const std::string path = std::string(FITLIB_TEST_DATA_DIR) + "/" + relative;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open reference data file " + path);
  return nlohmann::json::parse(in);
}

/// A JSON array of numbers as a vector.
inline std::vector<double> to_vector(const nlohmann::json& a) { return a.get<std::vector<double>>(); }

/// A JSON array of rows as a column-major matrix (n × n for a square one).
inline std::vector<double> to_col_major(const nlohmann::json& rows) {
  const std::size_t r = rows.size(), c = rows.at(0).size();
  std::vector<double> m(r * c);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) m[i + j * r] = rows[i][j].get<double>();
  return m;
}

}  // namespace fitlib::test
