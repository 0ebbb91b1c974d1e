<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\BackgroundJob;

use OCP\AppFramework\Utility\ITimeFactory;

abstract class Job implements IJob {
	protected $argument;
	protected ITimeFactory $time;
	protected bool $allowParallelRuns = true;

	public function __construct(ITimeFactory $time) {
		$this->time = $time;
	}

	public function setArgument($argument) {
		$this->argument = $argument;
	}

	public function getArgument() {
		return $this->argument;
	}

	public function setAllowParallelRuns(bool $allow): void {
		$this->allowParallelRuns = $allow;
	}

	public function getAllowParallelRuns(): bool {
		return $this->allowParallelRuns;
	}

	abstract protected function run($argument);
}
