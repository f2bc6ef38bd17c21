// A forwarding header, kept only for tests/quality_test.cc until it includes
// job_util.h itself: LocalCluster is gone. SupervisedJob
// (supervised_job.h) is the one process fixture; the helpers process tests
// share (kSmallDlrmTables, MakeSyntheticData, RunLocal, WaitForJob, ...)
// are in job_util.h.
#ifndef SHARDPS_TESTS_TESTING_CLUSTER_H_
#define SHARDPS_TESTS_TESTING_CLUSTER_H_

#include "tests/testing/job_util.h"

#endif  // SHARDPS_TESTS_TESTING_CLUSTER_H_
