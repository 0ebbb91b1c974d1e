<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\BackgroundJob\IJobList;

/** The background jobs queued by a test, in order; like Nextcloud's, a job is queued once. */
final class TestJobList implements IJobList {
	/** @var list<array{0: string, 1: mixed}> class, argument */
	public array $jobs = [];

	public function add($job, $argument = null): void {
		if (!$this->has($job, $argument)) {
			$this->jobs[] = [is_string($job) ? $job : get_class($job), $argument];
		}
	}

	public function has($job, $argument): bool {
		$class = is_string($job) ? $job : get_class($job);
		foreach ($this->jobs as [$c, $a]) {
			if ($c === $class && $a == $argument) {
				return true;
			}
		}
		return false;
	}
}
