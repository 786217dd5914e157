// Open MPI counterpart of p2p_bench (same measurement): one-way latency from a blocking
// ping-pong, unidirectional bandwidth from a window of MPI_Isend/MPI_Irecv. Built and run by
// p2p_compare.sh with mpicxx/mpirun; not part of the CMake build.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* label = argc > 1 ? argv[1] : "mpi";
  size_t maxb = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (256u << 20);
  int peer = 1 - rank;
  std::vector<char> buf(maxb, 1), buf2(maxb, 2);
  std::vector<std::vector<char>> rbufs;
  using Clock = std::chrono::steady_clock;
  for (size_t bytes = 8; bytes <= maxb; bytes *= 2) {
    int iters = bytes <= 65536 ? 2000 : bytes <= (4u << 20) ? 100 : 5;
    std::vector<double> rtt;
    for (int s = 0; s < 7; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
          MPI_Send(buf.data(), (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
          MPI_Recv(buf2.data(), (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf2.data(), (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
      }
      rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
    }
    int window = bytes <= 65536 ? 64 : bytes <= (4u << 20) ? 16 : bytes <= (32u << 20) ? 4 : 2;
    int rounds = bytes <= (1u << 20) ? 20 : bytes <= (32u << 20) ? 4 : 2;
    // The receiver's window of buffers, each the size of this message (not maxb: 64 buffers of
    // 256 MiB would be 16 GiB); written once so that the timed receives do not fault pages in.
    if (rank == 1) rbufs.assign(window, std::vector<char>(bytes, 0));
    std::vector<MPI_Request> req(window);
    std::vector<double> bw;
    for (int s = 0; s < 5; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < window; ++i) {
          if (rank == 0)
            MPI_Isend(buf.data(), (int)bytes, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
          else
            MPI_Irecv(rbufs[i].data(), (int)bytes, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
        }
        MPI_Waitall(window, req.data(), MPI_STATUSES_IGNORE);
      }
      long ack = 0;
      if (rank == 0)
        MPI_Recv(&ack, 1, MPI_LONG, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else
        MPI_Send(&ack, 1, MPI_LONG, peer, 3, MPI_COMM_WORLD);
      double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      bw.push_back((double)bytes * window * rounds / sec / 1e9);
    }
    if (rank == 0) {
      std::printf("%s,%zu,%.3f,%.3f,\n", label, bytes, median(rtt) / 2, median(bw));
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
