<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Command;

use OCA\Istota\Service\SelfTest as SelfTestService;
use Symfony\Component\Console\Command\Command;
use Symfony\Component\Console\Formatter\OutputFormatter;
use Symfony\Component\Console\Input\InputInterface;
use Symfony\Component\Console\Output\OutputInterface;

/**
 * `occ istota:self-test` prints one ✓/✗ line per hop between Nextcloud and the sidecar
 * and exits with 1 when any hop fails. It never prints a secret.
 */
class SelfTest extends Command {
	public function __construct(
		private readonly SelfTestService $selfTest,
	) {
		parent::__construct();
	}

	protected function configure(): void {
		$this->setName('istota:self-test')
			->setDescription('Check every hop between Nextcloud, Talk and the Istota sidecar');
	}

	protected function execute(InputInterface $input, OutputInterface $output): int {
		$failed = false;
		foreach ($this->selfTest->run() as $check) {
			$failed = $failed || !$check->ok;
			$output->writeln(sprintf(
				'%s %s: %s',
				$check->ok ? '<info>✓</info>' : '<error>✗</error>',
				OutputFormatter::escape($check->name),
				OutputFormatter::escape($check->detail),
			));
		}
		return $failed ? self::FAILURE : self::SUCCESS;
	}
}
