// The job config pieces every in-process test of ParameterServerCore
// builds: a small sparse table and the cluster settings of one test job.
// Test-only, header-only; plain functions on the caller's JobConfig (no
// state, safe from any thread on distinct configs).
#ifndef SHARDPS_SERVER_CORE_TEST_CONFIG_H_
#define SHARDPS_SERVER_CORE_TEST_CONFIG_H_

#include <cstdint>
#include <string>

#include "proto/config.pb.h"

namespace shardps::testing {

// Adds a SPARSE table `id` / `name` of `dim` columns, seed 5, UNIFORM(0.1)
// initialized, without an optimizer (the caller sets one); returns it.
inline TableConfig* AddSparseTable(JobConfig* c, uint32_t id, const std::string& name,
                                   uint32_t dim = 4) {
  TableConfig* t = c->add_tables();
  t->set_id(id);
  t->set_name(name);
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(dim);
  t->set_seed(5);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.1f);
  return t;
}

// Adam: learning rate 0.01, betas 0.9 / 0.999, eps 1e-8.
inline void SetAdam(TableConfig* t) {
  AdamConfig* adam = t->mutable_optimizer()->mutable_adam();
  adam->set_learning_rate(0.01f);
  adam->set_beta1(0.9f);
  adam->set_beta2(0.999f);
  adam->set_eps(1e-8f);
}

// The cluster of a test job: `servers`, `workers`, `partitions`, `mode`,
// 64 MiB messages, a 60 s server deadline and dense chunks of 8 values;
// returns it for the caller's changes.
inline ClusterConfig* SetTestCluster(JobConfig* c, uint32_t servers, uint32_t workers,
                                     uint32_t partitions, ConsistencyMode mode) {
  ClusterConfig* k = c->mutable_cluster();
  k->set_num_servers(servers);
  k->set_num_workers(workers);
  k->set_num_partitions(partitions);
  k->set_mode(mode);
  k->set_max_message_bytes(64 << 20);
  k->set_server_deadline_ms(60000);
  k->set_dense_chunk_size(8);
  return k;
}

}  // namespace shardps::testing

#endif  // SHARDPS_SERVER_CORE_TEST_CONFIG_H_
