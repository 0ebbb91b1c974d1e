<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\BackgroundJob;

abstract class TimedJob extends Job {
	protected int $interval = 0;
	protected int $timeSensitivity = IJob::TIME_SENSITIVE;

	public function setInterval(int $seconds) {
		$this->interval = $seconds;
	}

	public function getInterval(): int {
		return $this->interval;
	}

	public function isTimeSensitive(): bool {
		return $this->timeSensitivity === IJob::TIME_SENSITIVE;
	}

	public function setTimeSensitivity(int $sensitivity): void {
		if ($sensitivity !== self::TIME_SENSITIVE && $sensitivity !== self::TIME_INSENSITIVE) {
			throw new \InvalidArgumentException('Invalid sensitivity');
		}
		$this->timeSensitivity = $sensitivity;
	}
}
