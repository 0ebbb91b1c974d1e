<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\BackgroundJob;

use OCA\Istota\Service\OutboxFlusher;
use OCA\Istota\Service\SidecarClient;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\BackgroundJob\IJob;
use OCP\BackgroundJob\TimedJob;

/**
 * FlushOutbox forwards Talk events that the sidecar could not take when they arrived,
 * in order. One run at a time: two parallel runs would only send rows twice.
 */
class FlushOutbox extends TimedJob {
	public const INTERVAL_SECONDS = 60;
	/** Upper bound for one run, well below the interval. */
	private const BUDGET_SECONDS = 30.0;

	public function __construct(
		ITimeFactory $time,
		private readonly OutboxFlusher $flusher,
	) {
		parent::__construct($time);
		$this->setInterval(self::INTERVAL_SECONDS);
		// Users wait for these events: run them even when cron is told to favour
		// time-insensitive work.
		$this->setTimeSensitivity(IJob::TIME_SENSITIVE);
		$this->setAllowParallelRuns(false);
	}

	protected function run($argument): void {
		$this->flusher->flush(self::BUDGET_SECONDS, SidecarClient::DEFAULT_TIMEOUT, SidecarClient::DEFAULT_CONNECT_TIMEOUT, respectBackoff: false);
	}
}
