#include "analysis.hpp"
