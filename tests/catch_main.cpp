// The test programs' main(): Catch2's session (compiled once, in catch_runner.cpp).
int meld_catch_session(int argc, char** argv);

int main(int argc, char** argv) {
  return meld_catch_session(argc, argv);
}
