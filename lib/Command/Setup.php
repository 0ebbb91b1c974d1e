<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Command;

use OCA\Istota\Service\HomeConversation;
use OCA\Istota\Service\InstallCommand;
use OCA\Istota\Service\SetupService;
use Symfony\Component\Console\Command\Command;
use Symfony\Component\Console\Formatter\OutputFormatter;
use Symfony\Component\Console\Input\InputInterface;
use Symfony\Component\Console\Input\InputOption;
use Symfony\Component\Console\Output\ConsoleOutputInterface;
use Symfony\Component\Console\Output\OutputInterface;

/**
 * `occ istota:setup` creates the shared secret and the bot secret if they are missing,
 * creates (or adopts) the bot's Nextcloud account, registers the bot with Talk and
 * prints (or writes) the sidecar's TOML configuration. When the sidecar already runs, every
 * user it lets use the bot gets their conversation with it (HomeConversation); otherwise
 * that happens when the sidecar starts. The TOML goes to standard output alone, so it can
 * be redirected; notes go to stderr and never carry a password.
 */
class Setup extends Command {
	public function __construct(
		private readonly SetupService $setup,
		private readonly InstallCommand $install,
		private readonly HomeConversation $home,
	) {
		parent::__construct();
	}

	protected function configure(): void {
		$this->setName('istota:setup')
			->setDescription('Create the Istota secrets and bot account, register the Talk bot and print the sidecar configuration')
			->addOption('nextcloud-url', null, InputOption::VALUE_REQUIRED, 'URL the sidecar uses to reach Nextcloud (default: overwrite.cli.url)')
			->addOption('sidecar-url', null, InputOption::VALUE_REQUIRED, 'URL Nextcloud uses to reach the sidecar; stored as the sidecar_url app config')
			->addOption('bot-user', null, InputOption::VALUE_REQUIRED, 'Nextcloud user id of the bot account, created when missing (default: the bot_user app config, else "istota")')
			->addOption('reset-bot-password', null, InputOption::VALUE_NONE, 'Give an existing bot account a new random password (needed when Istota does not know its password)')
			->addOption('write', null, InputOption::VALUE_REQUIRED, 'Write the configuration to this file (mode 0600) instead of printing it');
	}

	protected function execute(InputInterface $input, OutputInterface $output): int {
		$notes = $output instanceof ConsoleOutputInterface ? $output->getErrorOutput() : $output;
		try {
			$outcome = $this->setup->prepare(
				self::option($input, 'nextcloud-url'),
				self::option($input, 'sidecar-url'),
				self::option($input, 'bot-user'),
				$input->getOption('reset-bot-password') === true,
			);
		} catch (\InvalidArgumentException $e) {
			$notes->writeln('<error>' . OutputFormatter::escape($e->getMessage()) . '</error>');
			return self::INVALID;
		} catch (\RuntimeException $e) {
			$notes->writeln('<error>Could not set up the bot account: ' . OutputFormatter::escape($e->getMessage()) . '</error>');
			return self::FAILURE;
		}
		foreach ($outcome->account->notes as $note) {
			$notes->writeln('<info>' . OutputFormatter::escape($note) . '</info>');
		}
		foreach ($outcome->account->warnings as $warning) {
			$notes->writeln('<comment>' . OutputFormatter::escape($warning) . '</comment>');
		}
		$registration = $outcome->registration;
		$notes->writeln(($registration->registered ? '<info>' : '<comment>') . OutputFormatter::escape($registration->message) . ($registration->registered ? '</info>' : '</comment>'));

		$toml = $outcome->config->toToml();
		$path = self::option($input, 'write');
		// `istota install` runs this command before it starts the service; an admin who runs
		// it alone learns the one command left to run.
		$next = $this->install->noteWhenNotRunning();
		if ($next !== null) {
			$notes->writeln('<comment>' . OutputFormatter::escape($next) . '</comment>');
		}
		// An unregistered bot still gets its configuration (the secrets in it stay valid), but
		// the exit status says the setup is not complete, so scripts and installers notice.
		if ($path === null) {
			$output->write($toml, false, OutputInterface::OUTPUT_RAW);
			$this->conversations($registration->registered, $notes);
			return $registration->registered ? self::SUCCESS : self::FAILURE;
		}
		try {
			$this->setup->writeFile($path, $toml);
		} catch (\RuntimeException $e) {
			$notes->writeln('<error>Could not write the sidecar configuration: ' . OutputFormatter::escape($e->getMessage()) . '</error>');
			return self::FAILURE;
		}
		$notes->writeln(sprintf('Wrote the sidecar configuration to %s (mode 0600). Restart the sidecar to use it.', OutputFormatter::escape($path)));
		$this->conversations($registration->registered, $notes);
		return $registration->registered ? self::SUCCESS : self::FAILURE;
	}

	/**
	 * Gives every user the sidecar lets use the bot their conversation with it, and says
	 * what happened in one line.
	 */
	private function conversations(bool $registered, OutputInterface $notes): void {
		if (!$registered) {
			return;
		}
		$counts = $this->home->ensureAll();
		if (($counts[HomeConversation::SIDECAR_DOWN] ?? 0) > 0) {
			$notes->writeln('<comment>The sidecar is not answering yet: each user allowed to use the bot gets a conversation with it when the sidecar starts.</comment>');
			return;
		}
		$parts = [];
		foreach ([
			HomeConversation::CREATED => '%d made',
			HomeConversation::EXISTS => '%d already there',
			HomeConversation::DELETED => '%d deleted by their user (not made again)',
			HomeConversation::NOT_ALLOWED => '%d user(s) not allowed to use the bot',
			HomeConversation::FAILED => '%d failed (see the Nextcloud log)',
		] as $outcome => $format) {
			if (($counts[$outcome] ?? 0) > 0) {
				$parts[] = sprintf($format, $counts[$outcome]);
			}
		}
		if ($parts !== []) {
			$notes->writeln('Conversations with the bot: ' . implode(', ', $parts) . '.');
		}
	}

	private static function option(InputInterface $input, string $name): ?string {
		$value = $input->getOption($name);
		return is_string($value) && trim($value) !== '' ? trim($value) : null;
	}
}
