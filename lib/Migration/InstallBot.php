<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Migration;

use OCA\Istota\Service\BotRegistration;
use OCP\Migration\IOutput;
use OCP\Migration\IRepairStep;
use Psr\Log\LoggerInterface;

/**
 * InstallBot runs on install (every enable) and after each upgrade: it creates the bot
 * secret once and registers the bot with Talk. Talk being absent is a warning, never an
 * error: the app must install without it.
 */
class InstallBot implements IRepairStep {
	public function __construct(
		private readonly BotRegistration $registration,
		private readonly LoggerInterface $logger,
	) {
	}

	public function getName(): string {
		return 'Register the Istota bot with Talk';
	}

	public function run(IOutput $output): void {
		try {
			$result = $this->registration->register();
		} catch (\Throwable $e) {
			$this->logger->error('Registering the Istota bot failed', ['exception' => $e]);
			$output->warning('Registering the Istota bot failed; see the Nextcloud log.');
			return;
		}
		if ($result->registered) {
			$output->info($result->message);
		} else {
			$output->warning($result->message);
		}
	}
}
