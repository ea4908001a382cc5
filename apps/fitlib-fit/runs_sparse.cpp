// SPDX-License-Identifier: MIT
// fitlib-fit's runs over sparse templates (runs.hpp), compiled on their own.
#include "runs.hpp"

namespace fitlib::cli {

template Fits run_all<storage::Sparse>(const Args&, std::shared_ptr<const Model>, const std::vector<BinRange>&, io::RabbitReadOptions,
                                  const LikelihoodOptions&, const io::RabbitTensor&);

}  // namespace fitlib::cli
